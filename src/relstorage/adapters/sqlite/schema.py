"""Creating and checking the SQLite schema (the schema role)."""
import contextlib
import os
import time

from relstorage.adapters.schema import STEP_TABLES
from relstorage.adapters.schema import Schema

TABLES = ('schema_version', 'commit_row', 'oid_counter', 'transaction_log',
          'object_state', 'superseded_state', 'current_object',
          'blob_chunk', 'object_blob') + STEP_TABLES

#: The tables that hold data (zap_all empties them).
DATA_TABLES = ('object_state', 'superseded_state', 'current_object',
               'transaction_log', 'object_blob', 'blob_chunk') + STEP_TABLES


class SQLiteSchema(Schema):

    DDL_DIR = os.path.dirname(os.path.abspath(__file__))
    DATABASE = 'sqlite'
    #: The bytes of the database file (relstorage-stats; not its WAL).
    SIZE = """
        SELECT p.page_count * s.page_size
        FROM pragma_page_count() p, pragma_page_size() s"""

    def _list_tables(self, cursor):
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return [row[0] for row in cursor.fetchall()]

    @contextlib.contextmanager
    def _creating(self, conn, cursor):
        cm = self.connmanager
        # Persistent: readers and one writer work at once.  Switching a new
        # file to WAL needs an exclusive lock for which SQLite does not
        # always call the busy handler: with several processes opening the
        # new database at once it can fail at once with "database is
        # locked" (seen about once in 150 six-thread races on a loaded
        # machine), so it is retried until the lock timeout.
        deadline = time.monotonic() + cm.lock_timeout
        while True:
            try:
                cursor.execute('PRAGMA journal_mode = WAL')
                break
            except cm.driver.OperationalError as e:
                if 'locked' not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        # The write lock serialises processes creating the schema at the
        # same time: the second finds it made.
        cm.begin_write(cursor, 'creating the schema')
        yield
        cm.commit(conn, cursor)

    def zap_all(self):
        with self.connmanager.write_session('clearing the database') as cur:
            tables = set(self._list_tables(cur))
            for table in DATA_TABLES:
                if table in tables:
                    cur.execute(f'DELETE FROM {table}')
            cur.execute('UPDATE commit_row SET tid = 0')
            cur.execute('UPDATE oid_counter SET next_oid = 1')

    def drop_all(self):
        with self.connmanager.write_session('dropping the schema') as cur:
            for table in TABLES:
                cur.execute(f'DROP TABLE IF EXISTS {table}')
