"""The MySQL and MariaDB adapter (mysqlclient or PyMySQL)."""
from .adapter import MySQLAdapter

__all__ = ['MySQLAdapter']
