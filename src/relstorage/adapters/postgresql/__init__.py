"""The PostgreSQL adapter (psycopg2 or psycopg 3)."""
from .adapter import PostgreSQLAdapter

__all__ = ['PostgreSQLAdapter']
