"""A run-time patch that lets RelStorage 4.3 run on MariaDB, for the
benchmark only.

Imported by ``workload.py --patch-mariadb``, i.e. only in a process of the
reference environment (``benchmarks/.venv-reference``) that runs RelStorage
4.3 on the ``mysql`` backend; it changes nothing on disk and never touches
our own package.  run.py announces it in the report and the JSON.

RelStorage 4.3 fails on MariaDB 10.11 in exactly two places, and this
module changes exactly those two, leaving every other code path as 4.3
ships it:

1. ``relstorage.adapters.mysql.schema.MySQLVersionDetector`` parses
   ``SELECT version()`` ("10.11.19-MariaDB-...") as the version tuple
   (10, 11, 19), so ``requires_values_upsert_alias()`` answers that the
   server is MySQL 8.0.19 or later, and the statement compiler
   (``relstorage.adapters.mysql.drivers``) and the mover's ``restore``
   then send MySQL 8's ``INSERT ... AS excluded ON DUPLICATE KEY UPDATE``,
   which MariaDB rejects as a syntax error.  Patched: the method answers
   False when the version string names MariaDB, so 4.3 sends the
   ``VALUES(column)`` form that it sends to MySQL before 8.0.19 and that
   MariaDB accepts.

2. The history-preserving ``object_state`` table, as 4.3's generic
   ``AbstractSchemaInstaller.CREATE_OBJECT_STATE_TMPLS`` declares it, has
   two column-level references without a column list (``tid ... REFERENCES
   "transaction"``).  MySQL (before 9.0) parses inline references and
   ignores them; MariaDB enforces them and refuses this form ("errno: 150
   Foreign key constraint is incorrectly formed").  Patched: the MySQL
   schema installer gets the same template with those two inline
   ``REFERENCES`` clauses removed, which is the table MySQL creates from
   it.  The table-level foreign keys (``current_object`` and ``blob_chunk``
   to ``object_state``) are left as they are: MariaDB accepts them and
   MySQL enforces them too.

``apply()`` checks that each thing it patches is there in the expected
form and raises otherwise, so that a different RelStorage cannot be
patched silently.
"""
import re

#: What run.py prints and records about this patch.
DESCRIPTION = (
    'RelStorage 4.3 on MariaDB runs with a run-time patch of two '
    'incompatibilities (benchmarks/mariadb_patch.py, applied only in the '
    "reference venv's workload processes): (1) MySQLVersionDetector."
    'requires_values_upsert_alias() answers False for a MariaDB version '
    "string, so 4.3 sends VALUES(col) upserts instead of MySQL 8's "
    '"INSERT ... AS excluded"; (2) the two inline "REFERENCES transaction" '
    'clauses of the history-preserving object_state table, which MySQL '
    'ignores and MariaDB refuses, are left out.')

# An inline (column-level) reference: "REFERENCES <table>" with no column
# list, up to the end of the line.
_INLINE_REFERENCE = re.compile(r'\s+REFERENCES\s+"?\w+"?[ \t]*,[ \t]*$',
                               re.MULTILINE)


def _without_inline_references(template):
    stripped, count = _INLINE_REFERENCE.subn(',', template)
    if count != 2:
        raise RuntimeError(
            f'mariadb_patch: expected two inline REFERENCES in the '
            f'history-preserving object_state template, found {count}')
    return stripped


def apply():
    """Patch the imported RelStorage 4.3 for MariaDB; returns the list of
    what was patched."""
    import relstorage
    from importlib import metadata
    version = metadata.version('relstorage')
    if version != '4.3.0':
        raise RuntimeError(f'mariadb_patch is written for RelStorage '
                           f'4.3.0, not {version} ({relstorage.__file__})')
    from relstorage.adapters.mysql import schema

    detector = schema.MySQLVersionDetector
    original = detector.requires_values_upsert_alias

    def requires_values_upsert_alias(self, cursor):
        if 'mariadb' in (self.get_version(cursor) or '').lower():
            return False
        return original(self, cursor)
    detector.requires_values_upsert_alias = requires_values_upsert_alias

    installer = schema.MySQLSchemaInstaller
    if 'CREATE_OBJECT_STATE_TMPLS' in vars(installer):
        # 4.3 ships the MySQL installer without its own templates.
        raise RuntimeError('mariadb_patch: MySQLSchemaInstaller already '
                           'has its own object_state templates')
    preserving, free = installer.CREATE_OBJECT_STATE_TMPLS
    installer.CREATE_OBJECT_STATE_TMPLS = (
        _without_inline_references(preserving), free)
    return ['MySQLVersionDetector.requires_values_upsert_alias',
            'MySQLSchemaInstaller.CREATE_OBJECT_STATE_TMPLS']
