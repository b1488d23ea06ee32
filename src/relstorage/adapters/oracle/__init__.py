"""The Oracle adapter (python-oracledb or cx_Oracle)."""
from .adapter import OracleAdapter

__all__ = ['OracleAdapter']
