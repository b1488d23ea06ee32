"""Creating and checking the MySQL schema (the schema role)."""
import contextlib
import os

from relstorage.adapters.schema import Schema

TABLES = ('schema_version', 'commit_row', 'new_oid', 'transaction_log',
          'object_state', 'superseded_state', 'current_object')


class MySQLSchema(Schema):

    DDL_DIR = os.path.dirname(os.path.abspath(__file__))

    def _list_tables(self, cursor):
        cursor.execute("""
            SELECT table_name FROM information_schema.tables
            WHERE table_schema = DATABASE()""")
        return [row[0] for row in cursor.fetchall()]

    @contextlib.contextmanager
    def _creating(self, conn, cursor):
        # DDL commits by itself in MySQL, and every statement of the schema
        # files is idempotent: processes creating it at once need no lock.
        yield

    def zap_all(self):
        with self.connmanager.write_session('clearing the database') as cur:
            tables = set(self._list_tables(cur))
            for table in ('object_state', 'superseded_state',
                          'current_object', 'transaction_log'):
                if table in tables:
                    cur.execute(f'DELETE FROM {table}')
            cur.execute('UPDATE commit_row SET tid = 0')
            cur.execute('DELETE FROM new_oid')
        # TRUNCATE resets AUTO_INCREMENT; it commits by itself.
        with self.connmanager.write_session('clearing the database') as cur:
            cur.execute('TRUNCATE new_oid')

    def drop_all(self):
        with self.connmanager.write_session('dropping the schema') as cur:
            for table in TABLES:
                cur.execute(f'DROP TABLE IF EXISTS {table}')
