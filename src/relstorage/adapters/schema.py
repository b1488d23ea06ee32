"""Shared default of the schema role (see interfaces.ISchema).

The first schema (version 1) of each database and history mode is a plain
SQL file beside its adapter (``schema-history-preserving.sql``,
``schema-history-free.sql``); every later version is a step in the
top-level ``migrations/`` directory (installed as
``relstorage.migrations``), never an edit of the first.  A new database is
made by running version 1 and then every step in order, so the steps are
exercised by every test that creates a database.

This module checks the ``schema_version`` row and creates the schema once
even when several processes start at the same time (the database-specific
``_creating`` serialises them).  A database at an older version is refused
with the steps it needs; applying them is the administrator's decision.
"""
import contextlib
import os
import re

from relstorage import migrations
from relstorage.adapters.interfaces import ISchema
from relstorage.errors import SchemaError
from zope.interface import implementer

#: The version this code reads and writes.
SCHEMA_VERSION = migrations.LATEST

#: The tables the steps after version 1 add, in every database: packing
#: (step 0003-pack), the leases (step 0004-lease: the pack lock on MySQL),
#: the revisions a pack could not read (step 0006-unreadable) and the
#: JSON mirror (0007-json).
STEP_TABLES = ('object_ref', 'pack_state', 'pack_run', 'pack_object',
               'pack_reached', 'lease', 'pack_unreadable',
               # Step 0007-json: the JSON mirror.
               'object_json')


def sql_statements(path):
    """The statements of one SQL file, without comments.  A statement ends
    at a semicolon outside a dollar-quoted string (``$body$ ... $body$``,
    PostgreSQL's function bodies)."""
    with open(path, encoding='utf-8') as f:
        text = f.read()
    lines = [line for line in text.splitlines()
             if not line.lstrip().startswith('--')]
    statements, current, quote = [], [], None
    for part in _DOLLAR_QUOTE.split('\n'.join(lines)):
        if _DOLLAR_QUOTE.fullmatch(part):
            quote = None if quote == part else quote or part
            current.append(part)
            continue
        if quote is not None:
            current.append(part)
            continue
        pieces = part.split(';')
        for piece in pieces[:-1]:
            current.append(piece)
            statements.append(''.join(current))
            current = []
        current.append(pieces[-1])
    statements.append(''.join(current))
    return [s.strip() for s in statements if s.strip()]


#: A dollar-quote tag (the split keeps the tags, capturing them).
_DOLLAR_QUOTE = re.compile(r'(\$[A-Za-z_]*\$)')


def ddl_statements(directory, keep_history):
    """The statements of one first-version schema file."""
    name = ('schema-history-preserving.sql' if keep_history
            else 'schema-history-free.sql')
    return sql_statements(os.path.join(directory, name))


@implementer(ISchema)
class Schema:

    #: The directory of the adapter's first-version schema files.
    DDL_DIR = None
    #: The adapter's name in migration file names (``postgresql``...).
    DATABASE = None
    #: The newest transaction a pack marked (history-preserving;
    #: relstorage-stats).
    LAST_PACKED = 'SELECT MAX(tid) FROM transaction_log WHERE packed'
    #: The server's sessions connected to this database, the asking one
    #: included (relstorage-stats), or None where there is no server.
    SESSIONS = None

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
            version = self._version(cursor)
            if version == SCHEMA_VERSION:
                # The usual case: nothing to create, so no lock to take
                # (another process may be committing right now).
                self._check(cursor)
                return
            if version is not None and version > SCHEMA_VERSION:
                self._refuse(version)
            if not create or read_only:
                if version is not None:
                    self._refuse(version)
                raise SchemaError(
                    f'{self.describe()} holds no (or an incomplete) '
                    f'relstorage schema and create-schema is false (or the '
                    f'storage is read-only)')
            with self._creating(conn, cursor):
                # Another process may have been creating it meanwhile: an
                # older version seen before the lock may have been one
                # half-way through creation, so look again.
                version = self._version(cursor)
                if version is None:
                    # Where DDL is not transactional (MySQL) another
                    # process may have died half-way: the statements are
                    # idempotent there, so running them all completes it.
                    for stmt in self.creation_statements():
                        self._run(cursor, stmt)
                elif version != SCHEMA_VERSION:
                    self._refuse(version)
                self._check(cursor)
        finally:
            cm.close(conn, cursor)

    def status(self):
        """``(version, keep_history)`` of the schema the database holds,
        or ``(None, None)`` when it holds none (or an incomplete one).
        Reads only."""
        cm = self.connmanager
        conn = cm.connect()
        cursor = conn.cursor()
        try:
            version = self._version(cursor)
            if version is None:
                return None, None
            cursor.execute('SELECT keep_history FROM schema_version')
            return version, bool(cursor.fetchone()[0])
        finally:
            cm.close(conn, cursor)

    def migrate(self):
        """Apply the migration steps the database needs, under the lock
        that serialises schema creation (two runs cannot interleave, nor a
        run and a storage creating the schema), in one transaction where
        the database has transactional DDL (PostgreSQL, SQLite; MySQL's
        steps are idempotent and their last statement sets the version,
        so a run stopped half-way is completed by the next).  Returns
        ``(version before, steps applied)``."""
        cm = self.connmanager
        conn = cm.connect()
        cursor = conn.cursor()
        try:
            with self._creating(conn, cursor):
                version = self._version(cursor)
                if version is None:
                    raise SchemaError(
                        f'{self.describe()} holds no relstorage schema: '
                        f'there is nothing to migrate (a storage creates '
                        f'the newest schema when it first opens the '
                        f'database with create-schema true)')
                if version > SCHEMA_VERSION:
                    self._refuse(version)
                self._check(cursor)
                applied = migrations.steps(version, SCHEMA_VERSION)
                for step in applied:
                    for statement in self.step_statements(step):
                        self._run(cursor, statement)
                return version, applied
        finally:
            cm.close(conn, cursor)

    def creation_statements(self):
        """The statements that make a new database: version 1, then every
        migration step."""
        statements = ddl_statements(self.DDL_DIR, self.keep_history)
        for step in migrations.steps(1, SCHEMA_VERSION):
            statements += self.step_statements(step)
        return statements

    def step_statements(self, step):
        """The statements of one migration step for this database and
        history mode."""
        return sql_statements(step.path(self.DATABASE, self.keep_history))

    def _run(self, cursor, statement):
        """Run one statement of a schema file or migration step."""
        cursor.execute(statement)

    def _refuse(self, version):
        where = self.describe()
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f'{where} holds schema version {version}, newer than '
                f'version {SCHEMA_VERSION} that this relstorage knows: '
                f'upgrade relstorage')
        files = ', '.join(
            step.relative_path(self.DATABASE, self.keep_history)
            for step in migrations.steps(version, SCHEMA_VERSION))
        raise SchemaError(
            f'{where} holds schema version {version}; this relstorage needs '
            f'version {SCHEMA_VERSION}: run relstorage-migrate CONFIG '
            f'--apply with every client stopped, or apply the migration '
            f'steps {files} by hand (see migrations/README.rst)')

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

    def _version(self, cursor):
        """The schema version the database holds, or None if it holds no
        complete schema (no tables, or no version row yet)."""
        if not self._tables(cursor):
            return None
        cursor.execute('SELECT version FROM schema_version')
        rows = cursor.fetchall()
        if not rows:
            return None
        if len(rows) != 1:
            raise SchemaError(
                f'{self.describe()}: schema_version holds {len(rows)} rows')
        return rows[0][0]

    def _check(self, cursor):
        cursor.execute('SELECT keep_history FROM schema_version')
        keep_history = cursor.fetchone()[0]
        if bool(keep_history) != self.keep_history:
            raise SchemaError(
                f'{self.describe()} holds a {migrations.mode_name(keep_history)} schema but '
                f'keep-history is {str(self.keep_history).lower()}')
