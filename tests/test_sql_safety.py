"""Every statement binds its values as parameters, or splices only what the
code built itself (integers, table names from the code, validated
settings).  The statements that splice anything are listed here with the
reason; a new one fails this test until it is reviewed and listed.

The scan reads the source (ast): calls of ``execute`` and ``executemany``
whose statement is an f-string (each spliced expression is checked) or an
expression built with ``%``, ``+`` or ``join``.
"""
import ast
import pathlib

import tally

SRC = pathlib.Path(__file__).resolve().parent.parent / 'src' / 'relstorage'

#: (file, spliced expression) -> why it is safe.
REVIEWED = {
    ('adapters/mysql/connection.py', 'seconds'):
        'an int computed from commit-lock-timeout',
    ('adapters/postgresql/connection.py', 'self._lock_timeout_ms()'):
        'an int computed from commit-lock-timeout',
    ('adapters/mysql/schema.py', 'table'):
        'table names from the schema files of the code',
    ('adapters/postgresql/schema.py', 'table'):
        'table names from the schema files of the code',
    ('adapters/postgresql/schema.py', 'function'):
        'function names of the code (transactions.FUNCTIONS)',
    ('adapters/postgresql/schema.py', "', '.join(present)"):
        'table names found in the catalogue, among the code\'s own',
    ('adapters/sqlite/schema.py', 'table'):
        'table names from the schema files of the code',
    ('adapters/sqlite/connection.py', 'name'):
        'pragma names checked against the known pragmas (check_pragmas)',
    ('adapters/sqlite/connection.py', 'value'):
        'pragma values checked to be plain numbers or words '
        '(check_pragmas)',
    ('adapters/postgresql/connection.py',
     "'; '.join(statements)"):
        'a ROLLBACK and the staging table, constants of the code',
    ('adapters/postgresql/drivers.py', 'first'):
        'statement constants of the code, no values',
    ('adapters/postgresql/drivers.py', 'self._sql(statement)'):
        'prepared-statement names and constants of the code',
    ('adapters/mirror.py', 'p'):
        'the driver\'s placeholder (PARAM), a constant of the code',
    ('adapters/mirror.py', 'self.revisions'):
        'table names and a join of the code, chosen by the history mode',
    ('adapters/mirror.py', 'gone'):
        'a condition of the code (table names by the history mode)',
    ('adapters/mirror.py', 'where'):
        'a condition of the code with placeholders (_at); the path and '
        'the value are bound',
    ('adapters/postgresql/drivers.py', 'middle'):
        "the JSON mirror's statements (adapters/mirror.py), constants of "
        'the code with placeholders; the values are bound',
    ('adapters/postgresql/drivers.py', 'call'):
        'statement constants of the code; the values are bound',
    ('adapters/postgresql/drivers.py', 'then'):
        'statements of the code after a COMMIT (the call\'s result, a '
        'snapshot\'s start and its poll); the values are bound',
    ('adapters/postgresql/drivers.py', "'; '.join([*statements, sql])"):
        'the statements that begin a commit (constants of the code, the '
        'lock timeout an int) and a statement whose values are bound',
    ('adapters/mysql/connection.py', "'; '.join([*statements, sql])"):
        'the statements that begin a commit (constants of the code) and a '
        'statement whose values are bound',
    ('adapters/objects.py',
     'self.LOAD_REVISIONS.format(oids=oid_list, tids=tid_list)'):
        'placeholders, or ints written by in_list (MySQL); the values are '
        'bound',
    ('adapters/mysql/locks.py', 'self._lock_objects_sql(oids, staged)'):
        'a statement of the code, or one with an IN list of ints '
        '(objects.in_list)',
    ('adapters/mysql/locks.py', 'self._read_current_sql(read_current_oids)'):
        'a statement of the code with an IN list of ints (objects.in_list) '
        'and one of two lock clauses of the code',
    ('adapters/mysql/blobs.py',
     'self.INSERT_CHUNK % (blob_id, num, data.hex())'):
        'an int, an int and hex digits (x\'...\' literal)',
    ('adapters/mysql/objects.py', "head + ','.join(values)"):
        'placeholders built by the code; the values are bound',
    ('adapters/mysql/pack.py', 'INSERT INTO object_ref'):
        'rows of ints written with %d',
    ('adapters/mysql/pack.py', 'INSERT INTO pack_batch'):
        'zoids written with %d',
    ('adapters/mysql/pack.py', "'OPTIMIZE TABLE ' + ', '.join(tables)"):
        'table names of the code',
    ('cli/stats.py', 'SELECT pack_tid FROM pack_run WHERE phase = %d'):
        'a constant of the code written with %d',
    ('adapters/postgresql/drivers.py', 's.prepare_sql for s in statements'):
        'PREPARE statements of the code',
    ('adapters/oracle/locks.py', 'wait=self._wait()'):
        'an int computed from commit-lock-timeout (WAIT takes no bind)',
    ('adapters/oracle/transactions.py',
     'wait=self.connmanager.wait_seconds'):
        'an int computed from commit-lock-timeout (WAIT takes no bind)',
    ('adapters/oracle/oids.py', 'self.ALTER_INCREMENT.format(step='):
        'an int written with {:d} (DDL takes no bind)',
    ('adapters/oracle/pack.py', 'table'):
        'table names of the code',
    ('adapters/oracle/schema.py', 'table'):
        'table names from the schema files of the code',
}
#: Statement constants whose ``{in_list}`` is an IN list that in_list()
#: writes from ints only (tests/test_storage.py,
#: test_oid_lists_written_into_statements_are_ints_only).
IN_LIST = 'format(in_list='



def _spliced(path):
    """(file, expression) of every splice into an executed statement."""
    rel = str(path.relative_to(SRC))
    tree = ast.parse(path.read_text(encoding='utf-8'))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ('execute', 'executemany')
                and node.args):
            continue
        statement = node.args[0]
        if isinstance(statement, ast.JoinedStr):
            for part in statement.values:
                if isinstance(part, ast.FormattedValue):
                    yield rel, ast.unparse(part.value)
        elif isinstance(statement, ast.BinOp) or (
                isinstance(statement, ast.Call)
                and isinstance(statement.func, ast.Attribute)
                and statement.func.attr in ('join', 'format')):
            yield rel, ast.unparse(statement)


def _reviewed(found):
    rel, text = found
    if IN_LIST in text and ('share=share' not in text or any(
            rel == file and expr in text for file, expr in REVIEWED)):
        return True
    return any(rel == file and (text == expr or expr in text)
               for file, expr in REVIEWED)


def test_every_spliced_statement_is_reviewed():
    found = [item for path in sorted(SRC.rglob('*.py'))
             for item in _spliced(path)]
    assert found, 'the scan found nothing: it is broken'
    unreviewed = [item for item in found if not _reviewed(item)]
    assert not unreviewed, (
        'statements splicing values not reviewed in '
        f'tests/test_sql_safety.py: {unreviewed}')
    # Nothing listed that the code no longer does.
    stale = [key for key in REVIEWED
             if not any(rel == key[0] and (text == key[1] or key[1] in text)
                        for rel, text in found)]
    assert not stale, f'reviewed splices no longer in the code: {stale}'
    tally.add('SQL', 'spliced statements reviewed', len(found))
