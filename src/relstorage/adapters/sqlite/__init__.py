"""The SQLite adapter (standard library ``sqlite3``)."""
from .adapter import SQLiteAdapter

__all__ = ['SQLiteAdapter']
