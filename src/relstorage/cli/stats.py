"""relstorage-stats: what the relstorage databases of a ZConfig file hold.

    relstorage-stats [--json] CONFIG

For each ``<relstorage>`` section: the database's size, its schema
version and history mode, the objects, revisions and transactions it
holds, how far its history reaches back, its last transaction and its
last pack, and the blobs kept in it.  Read only; counting the rows reads
whole tables, which takes a few seconds on millions of rows.  Other
storage sections are passed over.

Exit status: 0 done; 1 a database could not be read; 2 bad input.
"""
import json
import sys
import time

from relstorage.adapters.pack import PackRun
from relstorage.cli import BAD_INPUT
from relstorage.cli import command_parser
from relstorage.cli import each_adapter
from relstorage.cli import load_or_report
from relstorage.cli import setup_logging
from relstorage.migrations import mode_name
from relstorage.tids import tid_time

PROGRAM = 'relstorage-stats'


def parser():
    p = command_parser(
        PROGRAM,
        'Print the size, object and transaction counts, history and last '
        'pack of the relstorage databases of a ZConfig file.',
        '%%import relstorage and one or more storage sections',
        quiet=False)
    p.add_argument('--json', action='store_true',
                   help='one JSON document (a list, a dict per storage)')
    return p


def _one_value(cursor, sql):
    cursor.execute(sql)
    row = cursor.fetchone()
    return None if row is None else row[0]


def _when(tid):
    if not tid:
        return None
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(tid_time(tid)))


def collect(schema):
    """The figures of one database, as a dict (None where unknown)."""
    version, keep_history = schema.status()
    figures = {'database': schema.describe(), 'schema_version': version}
    if version is None:
        return figures
    cm = schema.connmanager
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        value = _one_value
        figures['history'] = mode_name(keep_history)
        figures['size_bytes'] = int(value(cursor, schema.SIZE) or 0)
        figures['revisions'] = value(cursor,
                                     'SELECT COUNT(*) FROM object_state')
        if keep_history:
            figures['objects'] = value(
                cursor, 'SELECT COUNT(*) FROM current_object')
            figures['transactions'] = value(
                cursor, 'SELECT COUNT(*) FROM transaction_log')
        else:
            figures['objects'] = figures['revisions']
            figures['transactions'] = value(
                cursor, 'SELECT COUNT(DISTINCT tid) FROM object_state')
        objects = figures['objects']
        figures['revisions_per_object'] = (
            round(figures['revisions'] / objects, 2) if objects else None)
        oldest = value(cursor, 'SELECT MIN(tid) FROM object_state')
        last = value(cursor, 'SELECT MAX(tid) FROM object_state')
        figures['oldest_revision'] = _when(oldest)
        figures['last_transaction'] = _when(last)
        figures['last_pack'] = _last_pack(cursor, keep_history, schema)
        figures['blobs_in_database'] = value(
            cursor, 'SELECT COUNT(*) FROM object_blob')
        figures['blob_bytes_in_database'] = int(value(
            cursor, 'SELECT SUM(blob_size) FROM object_blob') or 0)
        if schema.SESSIONS is not None:
            # Not counting this one.
            figures['other_sessions'] = int(value(cursor, schema.SESSIONS)) - 1
    finally:
        cm.close(conn, cursor)
    return figures


def _last_pack(cursor, keep_history, schema):
    """The pack time of the last pack that ran to its end (its pack_run
    row), else, history-preserving, the newest transaction a pack marked."""
    cursor.execute('SELECT pack_tid FROM pack_run WHERE phase = %d'
                   % PackRun.DONE)
    row = cursor.fetchone()
    if row is not None:
        return _when(row[0])
    if keep_history:
        cursor.execute(schema.LAST_PACKED)
        row = cursor.fetchone()
        if row is not None and row[0]:
            return _when(row[0])
    return None


_LABELS = (
    ('database', 'database'), ('schema_version', 'schema version'),
    ('history', 'history'), ('size_bytes', 'size'),
    ('objects', 'objects'), ('revisions', 'revisions'),
    ('revisions_per_object', 'revisions per object'),
    ('transactions', 'transactions'),
    ('oldest_revision', 'oldest revision'),
    ('last_transaction', 'last transaction'), ('last_pack', 'last pack'),
    ('blobs_in_database', 'blobs in the database'),
    ('blob_bytes_in_database', 'blob bytes in the database'),
    ('other_sessions', 'sessions connected now'),
)


def _size(value):
    for unit in ('bytes', 'KiB', 'MiB', 'GiB'):
        if value < 1024 or unit == 'GiB':
            return f'{value:,.0f} {unit}' if unit == 'bytes' else \
                f'{value:,.1f} {unit}'
        value /= 1024
    return str(value)


def _text(name, figures):
    lines = [name]
    for key, label in _LABELS:
        if key not in figures:
            continue
        value = figures[key]
        if value is None:
            value = 'none' if key == 'last_pack' else '-'
        elif key in ('size_bytes', 'blob_bytes_in_database'):
            value = _size(value)
        elif isinstance(value, int):
            value = f'{value:,}'
        lines.append(f'  {label:<28}{value}')
    if figures.get('schema_version') is None:
        lines.append('  (no relstorage schema yet)')
    return '\n'.join(lines)


def main(argv=None):
    args = parser().parse_args(argv)
    log = setup_logging(PROGRAM, quiet=True)
    configs = load_or_report(PROGRAM, args.config)
    if configs is None:
        return BAD_INPUT
    status, found = each_adapter(
        configs, log, lambda adapter: collect(adapter.schema),
        'cannot read it')
    if args.json:
        print(json.dumps([dict(storage=name, **figures)
                          for name, figures in found], indent=2))
    else:
        print('\n\n'.join(_text(name, figures) for name, figures in found))
    return status


if __name__ == '__main__':
    sys.exit(main())
