"""Creating and checking the Oracle schema (the schema role).

DDL commits by itself in Oracle, and locks that last across DDL need
privileges an application account rarely has (DBMS_LOCK).  So creation
takes no lock: every statement of the schema files is run one by one, and
"already exists" errors are passed over, which makes two processes
creating the schema at once harmless.  What could mislead is a process
looking while another is half-way: it would see version 1 before the
migration steps ran, an "old" database.  So creation leaves the
``schema_version`` row out until every table is there and then inserts it
at the newest version: until then a looker sees no complete schema and
creates (idempotently) too.
"""
import contextlib
import os
import re

from relstorage.adapters.schema import STEP_TABLES
from relstorage.adapters.schema import SCHEMA_VERSION
from relstorage.adapters.schema import Schema

from .drivers import error_code

TABLES = ('schema_version', 'commit_row', 'transaction_log', 'object_state',
          'superseded_state', 'current_object', 'temp_store', 'blob_chunk',
          'object_blob') + STEP_TABLES

#: The tables that hold data (zap_all empties them).
DATA_TABLES = ('object_state', 'superseded_state', 'current_object',
               'transaction_log', 'object_blob', 'blob_chunk') + STEP_TABLES

#: "name is already used by an existing object", "unique constraint
#: violated" (a row inserted by another creator), "such column list already
#: indexed", "table can have only one primary key", "such unique or primary
#: key already exists", "column being added already exists in table": the
#: statement's work is already done.
ALREADY_DONE = {'ORA-00955', 'ORA-00001', 'ORA-01408', 'ORA-02260',
                'ORA-02261', 'ORA-01430'}

#: The statements that set the version (left to the end of a creation).
_VERSION_ROW = re.compile(
    r'^\s*(INSERT\s+INTO|UPDATE)\s+schema_version\b', re.IGNORECASE)

#: The sequence of object ids, as the schema files create it.
CREATE_SEQUENCE = ('CREATE SEQUENCE zoid_seq START WITH 1 INCREMENT BY 100 '
                   'NOCACHE')


class OracleSchema(Schema):

    DDL_DIR = os.path.dirname(os.path.abspath(__file__))
    DATABASE = 'oracle'
    #: The bytes the schema's segments take (relstorage-stats).
    SIZE = 'SELECT COALESCE(SUM(bytes), 0) FROM user_segments'
    LAST_PACKED = 'SELECT MAX(tid) FROM transaction_log WHERE packed = 1'

    def _list_tables(self, cursor):
        cursor.execute('SELECT LOWER(table_name) FROM user_tables')
        return [row[0] for row in cursor.fetchall()]

    def creation_statements(self):
        """Version 1 and every step, without their version rows, then the
        version row at the newest version (see the module docstring)."""
        statements = [s for s in super().creation_statements()
                      if not _VERSION_ROW.match(s)]
        statements.append(
            'INSERT INTO schema_version (id, version, keep_history) '
            f'VALUES (0, {int(SCHEMA_VERSION)}, '
            f'{1 if self.keep_history else 0})')
        return statements

    def _run(self, cursor, statement):
        """Run one schema statement; "already exists" means done."""
        try:
            cursor.execute(statement)
        except self.connmanager.driver.Error as e:
            if error_code(e) not in ALREADY_DONE:
                raise

    @contextlib.contextmanager
    def _creating(self, conn, cursor):
        # No lock (see the module docstring); the INSERTs and UPDATEs of
        # the files are committed here (the DDL committed itself).
        yield
        self.connmanager.commit(conn, cursor)

    def zap_all(self):
        with self.connmanager.write_session('clearing the database') as cur:
            tables = set(self._list_tables(cur))
            for table in DATA_TABLES:
                if table in tables:
                    cur.execute(f'DELETE FROM {table}')
            cur.execute('UPDATE commit_row SET tid = 0')
        # Restart the ids (DDL: commits by itself).
        with self.connmanager.write_session('clearing the database') as cur:
            cur.execute('DROP SEQUENCE zoid_seq')
            cur.execute(CREATE_SEQUENCE)

    def drop_all(self):
        with self.connmanager.write_session('dropping the schema') as cur:
            tables = set(self._list_tables(cur))
            for table in TABLES:
                if table in tables:
                    cur.execute(f'DROP TABLE {table} PURGE')
            cur.execute("""
                SELECT COUNT(*) FROM user_sequences
                WHERE sequence_name = 'ZOID_SEQ'""")
            if cur.fetchone()[0]:
                cur.execute('DROP SEQUENCE zoid_seq')

