"""Shared default of the schema role (see interfaces.ISchema).

The DDL of each database and history mode is a plain SQL file beside its
adapter (``schema-history-preserving.sql``, ``schema-history-free.sql``);
this module reads it, checks the ``schema_version`` row, and creates the
schema once even when several processes start at the same time (the
database-specific ``_creating`` serialises them).
"""
import contextlib
import os

from relstorage.adapters.interfaces import ISchema
from relstorage.errors import SchemaError
from zope.interface import implementer

SCHEMA_VERSION = 1


def ddl_statements(directory, keep_history):
    """The statements of one schema file, without comments."""
    name = ('schema-history-preserving.sql' if keep_history
            else 'schema-history-free.sql')
    with open(os.path.join(directory, name), encoding='utf-8') as f:
        text = f.read()
    lines = [line for line in text.splitlines()
             if not line.lstrip().startswith('--')]
    return [s.strip() for s in '\n'.join(lines).split(';') if s.strip()]


def _mode(keep_history):
    return 'history-preserving' if keep_history else 'history-free'


@implementer(ISchema)
class Schema:

    #: The directory of the adapter's schema files.
    DDL_DIR = None

    def __init__(self, connmanager, keep_history):
        self.connmanager = connmanager
        self.keep_history = keep_history

    def describe(self):
        return self.connmanager.describe()

    def prepare(self, create, read_only=False):
        cm = self.connmanager
        conn = cm.connect()
        cursor = conn.cursor()
        try:
            if self._complete(cursor):
                # The usual case: nothing to create, so no lock to take
                # (another process may be committing right now).
                self._check(cursor)
                return
            if not create or read_only:
                raise SchemaError(
                    f'{self.describe()} holds no (or an incomplete) '
                    f'relstorage schema and create-schema is false (or the '
                    f'storage is read-only)')
            with self._creating(conn, cursor):
                if self._complete(cursor):
                    self._check(cursor)     # another process was faster
                else:
                    # Where DDL is not transactional (MySQL) another
                    # process may be half-way: the statements are
                    # idempotent there, so running them all completes it.
                    for stmt in ddl_statements(self.DDL_DIR,
                                               self.keep_history):
                        cursor.execute(stmt)
        finally:
            cm.close(conn, cursor)

    def _list_tables(self, cursor):
        """The names of the tables in the database (or schema)."""
        raise NotImplementedError

    @contextlib.contextmanager
    def _creating(self, conn, cursor):
        """Hold whatever stops other processes creating the schema at the
        same time, inside a transaction committed on success."""
        raise NotImplementedError

    def _tables(self, cursor):
        """The tables present; SchemaError if they are something else's."""
        tables = set(self._list_tables(cursor))
        if tables and 'schema_version' not in tables:
            raise SchemaError(
                f'{self.describe()} holds tables that are not a relstorage '
                f'schema: {", ".join(sorted(tables))}')
        return tables

    def _complete(self, cursor):
        """True if the schema exists with its version row."""
        if not self._tables(cursor):
            return False
        cursor.execute('SELECT COUNT(*) FROM schema_version')
        return cursor.fetchone()[0] > 0

    def _check(self, cursor):
        cursor.execute('SELECT version, keep_history FROM schema_version')
        rows = cursor.fetchall()
        where = self.describe()
        if len(rows) != 1:
            raise SchemaError(f'{where}: schema_version holds {len(rows)} rows')
        version, keep_history = rows[0]
        if version != SCHEMA_VERSION:
            raise SchemaError(
                f'{where} holds schema version {version}; this relstorage '
                f'knows version {SCHEMA_VERSION} (see migrations/)')
        if bool(keep_history) != self.keep_history:
            raise SchemaError(
                f'{where} holds a {_mode(keep_history)} schema but '
                f'keep-history is {str(self.keep_history).lower()}')
