"""Creating and checking the SQLite schema (the schema role)."""
import os

from relstorage.adapters.interfaces import ISchema
from relstorage.errors import SchemaError
from zope.interface import implementer

SCHEMA_VERSION = 1

_HERE = os.path.dirname(os.path.abspath(__file__))

TABLES = ('schema_version', 'commit_row', 'oid_counter', 'transaction_log',
          'object_state', 'superseded_state', 'current_object')


def ddl_statements(keep_history):
    """The statements of the schema file for one history mode."""
    name = ('schema-history-preserving.sql' if keep_history
            else 'schema-history-free.sql')
    with open(os.path.join(_HERE, name), encoding='utf-8') as f:
        text = f.read()
    lines = [line for line in text.splitlines()
             if not line.lstrip().startswith('--')]
    return [s.strip() for s in '\n'.join(lines).split(';') if s.strip()]


@implementer(ISchema)
class SQLiteSchema:

    def __init__(self, connmanager, keep_history):
        self.connmanager = connmanager
        self.keep_history = keep_history

    def _mode(self, keep_history):
        return 'history-preserving' if keep_history else 'history-free'

    def prepare(self, create, read_only=False):
        cm = self.connmanager
        conn = cm.connect()
        try:
            cursor = conn.cursor()
            if self._tables(cursor):
                # The usual case: nothing to create, so no lock to take
                # (another process may be committing right now).
                self._check(cursor)
                return
            if not create or read_only:
                raise SchemaError(
                    f'{cm.path} holds no relstorage schema and create-schema '
                    f'is false (or the storage is read-only)')
            # Persistent: readers and one writer work at once.
            cursor.execute('PRAGMA journal_mode = WAL')
            # The write lock serialises processes creating the schema at
            # the same time: the second finds it made.
            cm.begin_write(cursor, 'creating the schema')
            if self._tables(cursor):
                self._check(cursor)
            else:
                for stmt in ddl_statements(self.keep_history):
                    cursor.execute(stmt)
            cm.commit(conn, cursor)
        finally:
            cm.close(conn, None)

    def _tables(self, cursor):
        """The relstorage tables present; SchemaError if the database holds
        tables of something else."""
        tables = {row[0] for row in cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if tables and 'schema_version' not in tables:
            raise SchemaError(
                f'{self.connmanager.path} holds tables that are not a '
                f'relstorage schema: {", ".join(sorted(tables))}')
        return tables

    def _check(self, cursor):
        path = self.connmanager.path
        rows = cursor.execute(
            'SELECT version, keep_history FROM schema_version').fetchall()
        if len(rows) != 1:
            raise SchemaError(f'{path}: schema_version holds {len(rows)} rows')
        version, keep_history = rows[0]
        if version != SCHEMA_VERSION:
            raise SchemaError(
                f'{path} holds schema version {version}; this relstorage '
                f'knows version {SCHEMA_VERSION} (see migrations/)')
        if bool(keep_history) != self.keep_history:
            raise SchemaError(
                f'{path} holds a {self._mode(keep_history)} schema but '
                f'keep-history is {str(self.keep_history).lower()}')

    def zap_all(self):
        with self.connmanager.write_session('clearing the database') as cur:
            tables = {row[0] for row in cur.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table in ('object_state', 'superseded_state',
                          'current_object', 'transaction_log'):
                if table in tables:
                    cur.execute(f'DELETE FROM {table}')
            cur.execute('UPDATE commit_row SET tid = 0')
            cur.execute('UPDATE oid_counter SET next_oid = 1')

    def drop_all(self):
        with self.connmanager.write_session('dropping the schema') as cur:
            for table in TABLES:
                cur.execute(f'DROP TABLE IF EXISTS {table}')
