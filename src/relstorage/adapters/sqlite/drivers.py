"""SQLite drivers.

Only the standard library's ``sqlite3`` module is supported; ``auto``
selects it.  The option exists so that configurations stay valid when
another driver is added.
"""
from relstorage.errors import ConfigurationError


def select_driver(name):
    """Return the DB-API module for the ``driver`` option's value."""
    if name in ('auto', 'sqlite3'):
        try:
            import sqlite3
        except ImportError as e:  # a Python built without _sqlite3
            raise ConfigurationError(
                f'driver: {name!r} needs the sqlite3 module, which this '
                f'Python was built without ({e})') from e
        return sqlite3
    raise ConfigurationError(f'driver: {name!r} is not one of auto, sqlite3')
