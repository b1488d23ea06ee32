"""Creating and checking the MySQL schema (the schema role)."""
import contextlib
import os

from relstorage.adapters.schema import STEP_TABLES
from relstorage.adapters.schema import Schema
from relstorage.errors import CommitLockTimeoutError

from .drivers import error_number

#: "This version of MariaDB doesn't yet support 'GET_LOCK in cluster'".
ER_NOT_SUPPORTED_YET = 1235
#: "Duplicate column name": an ADD COLUMN already done (MySQL has no
#: ADD COLUMN IF NOT EXISTS).
ER_DUP_FIELDNAME = 1060

TABLES = ('schema_version', 'commit_row', 'new_oid', 'transaction_log',
          'object_state', 'superseded_state', 'current_object',
          'blob_chunk', 'object_blob') + STEP_TABLES + ('commit_chain',)

#: The tables that hold data (zap_all empties them).
DATA_TABLES = ('object_state', 'superseded_state', 'current_object',
               'transaction_log', 'object_blob', 'blob_chunk',
               'commit_chain') + STEP_TABLES


class MySQLSchema(Schema):

    DDL_DIR = os.path.dirname(os.path.abspath(__file__))
    DATABASE = 'mysql'
    #: The bytes the database's tables take (relstorage-stats).
    SIZE = """
        SELECT SUM(data_length + index_length)
        FROM information_schema.tables
        WHERE table_schema = DATABASE()"""
    # (Without the PROCESS privilege a user sees its own sessions only.)
    SESSIONS = ('SELECT COUNT(*) FROM information_schema.processlist '
                'WHERE db = DATABASE()')

    def _run(self, cursor, statement):
        """Run one statement of a schema file or migration step; a column
        that already exists means done (see ``_creating``)."""
        try:
            cursor.execute(statement)
        except self.connmanager.driver.Error as e:
            if error_number(e) != ER_DUP_FIELDNAME:
                raise

    def _list_tables(self, cursor):
        cursor.execute("""
            SELECT table_name FROM information_schema.tables
            WHERE table_schema = DATABASE()""")
        return [row[0] for row in cursor.fetchall()]

    @contextlib.contextmanager
    def _creating(self, conn, cursor):
        # DDL commits by itself in MySQL, and every statement of the schema
        # files is idempotent, so two processes creating it at once do no
        # harm.  But a process that looks while another is half-way sees
        # version 1 before the migration steps have run, which looks like
        # an old database: a named lock (per database: lock names are
        # server-wide) makes it look again once the other is done.
        # (A Galera node keeps the lock to itself, and some MariaDB
        # releases refuse it on a cluster, ER_NOT_SUPPORTED_YET, MDEV-30473:
        # then the schema is made without it, as the statements allow.)
        try:
            cursor.execute(
                "SELECT GET_LOCK(CONCAT('relstorage-schema:', "
                "MD5(DATABASE())), %s)",
                (max(1, int(self.connmanager.lock_timeout)),))
        except self.connmanager.driver.Error as e:
            if error_number(e) != ER_NOT_SUPPORTED_YET:
                raise
            yield
            return
        if cursor.fetchone()[0] != 1:
            raise CommitLockTimeoutError(
                f'{self.describe()}: another process kept the schema lock '
                f'for longer than commit-lock-timeout while creating the '
                f'schema')
        try:
            yield
        finally:
            cursor.execute(
                "DO RELEASE_LOCK(CONCAT('relstorage-schema:', "
                "MD5(DATABASE())))")

    def zap_all(self):
        with self.connmanager.write_session('clearing the database') as cur:
            tables = set(self._list_tables(cur))
            for table in DATA_TABLES:
                if table in tables:
                    cur.execute(f'DELETE FROM {table}')
            cur.execute('UPDATE commit_row SET tid = 0, commit_seq = 0')
            cur.execute('DELETE FROM new_oid')
        # TRUNCATE resets AUTO_INCREMENT; it commits by itself.
        with self.connmanager.write_session('clearing the database') as cur:
            cur.execute('TRUNCATE new_oid')

    def drop_all(self):
        with self.connmanager.write_session('dropping the schema') as cur:
            for table in TABLES:
                cur.execute(f'DROP TABLE IF EXISTS {table}')
