"""Creating and checking the PostgreSQL schema (the schema role)."""
import contextlib
import os

from relstorage.adapters.schema import STEP_TABLES
from relstorage.adapters.schema import Schema

from .transactions import FUNCTIONS

TABLES = ('schema_version', 'commit_row', 'transaction_log', 'object_state',
          'superseded_state', 'current_object', 'blob_chunk',
          'object_blob') + STEP_TABLES

#: The tables that hold data (zap_all empties them).
DATA_TABLES = ('object_state', 'superseded_state', 'current_object',
               'transaction_log', 'object_blob', 'blob_chunk') + STEP_TABLES

#: The advisory lock (an arbitrary constant) that serialises processes
#: creating the schema at the same time.
SCHEMA_LOCK = 0x52454c5354  # 'RELST'


class PostgreSQLSchema(Schema):

    DDL_DIR = os.path.dirname(os.path.abspath(__file__))
    DATABASE = 'postgresql'
    #: The bytes the database takes (relstorage-stats).
    SIZE = 'SELECT pg_database_size(current_database())'
    SESSIONS = ('SELECT COUNT(*) FROM pg_stat_activity '
                'WHERE datname = current_database()')

    def _list_tables(self, cursor):
        # pg_class rather than information_schema.tables, whose view joins
        # more catalogs: the first query of a new session (every storage
        # opened runs it) took 1.4 ms against 2.2.
        cursor.execute("""
            SELECT relname FROM pg_catalog.pg_class
            WHERE relnamespace = current_schema()::regnamespace
              AND relkind IN ('r', 'p', 'v', 'f')""")
        return [row[0] for row in cursor.fetchall()]

    @contextlib.contextmanager
    def _creating(self, conn, cursor):
        cm = self.connmanager
        cm.begin_store(conn, cursor)
        # A transaction-scoped advisory lock: the second process to get it
        # finds the schema made (its check runs after the first commits).
        cursor.execute('SELECT pg_advisory_xact_lock(%s)', (SCHEMA_LOCK,))
        yield
        cm.commit(conn, cursor)

    def zap_all(self):
        with self.connmanager.write_session('clearing the database') as cur:
            tables = set(self._list_tables(cur))
            present = [t for t in DATA_TABLES if t in tables]
            cur.execute(f'TRUNCATE {", ".join(present)}')
            cur.execute('UPDATE commit_row SET tid = 0')
            cur.execute('ALTER SEQUENCE zoid_seq RESTART WITH 1')

    def drop_all(self):
        with self.connmanager.write_session('dropping the schema') as cur:
            for table in TABLES:
                cur.execute(f'DROP TABLE IF EXISTS {table}')
            cur.execute('DROP SEQUENCE IF EXISTS zoid_seq')
            for function in FUNCTIONS:
                cur.execute(f'DROP FUNCTION IF EXISTS {function}')
