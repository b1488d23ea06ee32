"""The database's part of the JSON mirror by table layout: what writing
the rendered rows costs, with nothing left to render, whether the JSON
goes into a table of its own (as ``json-state`` writes it) or into the
pickle's own row.

    .venv/bin/python benchmarks/mirror_floor.py [--backends postgresql,mysql]
        [--modes hp,hf] [--documents 5000] [--batch 100] [--repeat 3]

``benchmarks/mirror.py``'s ``free`` side measures the floor of the
layout the mirror has (a row in ``object_json`` beside each pickle, with
its primary key and its class index); no renderer goes below it.  This
script asks whether another layout would lower it, before anyone builds
one: the same rows, written the same way, into bare tables.

1. The rows: mirror.py's add phase (``--documents`` Plone-like documents,
   commits of ``--batch``) committed once to a FileStorage in a temporary
   directory; each record read back and rendered by
   ``relstorage.mirror.render``.  Each commit becomes one database
   transaction here, with one statement per table (the arrays our commits
   send).
2. Layouts, each on a fresh database, in turn (ABCDE EDCBA over
   ``--repeat`` rounds), the best time of each:

   ``pickles``
       ``object_state`` alone (zoid, tid, state, state_size; the primary
       key of the history mode, and the tid index on history-preserving
       databases): the baseline.
   ``table``
       and ``object_json`` as the schema has it (primary key zoid, the
       class index), written in the statement form the mirror uses (on
       PostgreSQL one JSONB array; on MariaDB rows of values, as below).
   ``table, no class index``
       the same without the class index.
   ``table, text arrays``
       (PostgreSQL) ``object_json`` written from arrays of text cast to
       JSONB, the form ``same row`` uses: the statement form apart from
       the layout.
   ``same row``
       the class's module and name and the JSON as three more columns of
       ``object_state``, in its one statement.

Only the tables differ between layouts: the schema's other tables,
its locks and its poll are left out, so the baseline is cheaper than a
commit, and what counts is each layout's time *beyond* ``pickles``,
seconds that add to a real commit as they are.  Results go to
``benchmarks/results/mirror-floor.json``.
"""
import json
import sys
import tempfile
import time
from pathlib import Path

import mirror_content
from harness import backends
from harness.backends import MODES, TITLES
from harness.cli import Parser
from harness.environment import environment, finish
from harness.figures import best
from harness.report import heading, log, render, show, write_results

HERE = Path(__file__).resolve().parent
perf = time.perf_counter

LAYOUTS = ('pickles', 'table', 'table, no class index',
           'table, text arrays', 'same row')


def transactions(documents, batch):
    """``[[(zoid, tid, state, module, name, json_text), ...], ...]``: the
    add phase's commits, each record rendered."""
    import datetime

    import transaction
    import ZODB
    from ZODB.FileStorage import FileStorage
    from ZODB.utils import u64

    from relstorage.mirror.render import render as render_record
    with tempfile.TemporaryDirectory() as tmp:
        storage = FileStorage(str(Path(tmp) / 'Data.fs'))
        db = ZODB.DB(storage)
        try:
            conn = db.open()
            rng = mirror_content.seeded(2)
            when = datetime.datetime(2026, 11, 28)
            conn.root()['folder'] = box = mirror_content.folder(0)
            transaction.commit()
            first = storage.lastTransaction()
            for number in range(documents):
                box._tree[f'document-{number}'] = mirror_content.document(
                    rng, number, when)
                if number % batch == batch - 1:
                    transaction.commit()
                    conn.cacheGC()
            transaction.commit()
            conn.close()
            out = []
            for txn in storage.iterator(start=first):
                if txn.tid == first:
                    continue
                rows = []
                for record in txn:
                    done = render_record(record.data)
                    rows.append((u64(record.oid), u64(txn.tid),
                                 record.data, done.module, done.name,
                                 done.json))
                out.append(rows)
            return out
        finally:
            db.close()


# -- PostgreSQL ----------------------------------------------------------

def pg_tables(layout, mode):
    key = '(zoid, tid)' if mode == 'hp' else '(zoid)'
    extra = (', class_module TEXT, class_name TEXT, json JSONB'
             if layout == 'same row' else '')
    out = [f'CREATE TABLE object_state (zoid BIGINT NOT NULL, '
           f'tid BIGINT NOT NULL, state BYTEA, state_size BIGINT NOT NULL'
           f'{extra}, PRIMARY KEY {key})']
    if mode == 'hp':
        out.append('CREATE INDEX object_state_tid ON object_state (tid)')
    if layout.startswith('table'):
        out.append('CREATE TABLE object_json (zoid BIGINT NOT NULL PRIMARY '
                   'KEY, tid BIGINT NOT NULL, class_module TEXT, '
                   'class_name TEXT, state JSONB)')
        if layout != 'table, no class index':
            out.append('CREATE INDEX object_json_class ON object_json '
                       '(class_name, class_module)')
    return out


def pg_statements(layout, mode, rows):
    zoids, tids, states, sizes, modules, names, texts = (
        [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
        [len(r[2]) for r in rows], [r[3] for r in rows],
        [r[4] for r in rows], [r[5] for r in rows])
    if layout == 'same row':
        return [(
            'INSERT INTO object_state (zoid, tid, state, state_size, '
            'class_module, class_name, json) '
            'SELECT z, t, s, n, m, c, CAST(j AS jsonb) FROM unnest('
            'CAST(%s AS bigint[]), CAST(%s AS bigint[]), '
            'CAST(%s AS bytea[]), CAST(%s AS bigint[]), '
            'CAST(%s AS text[]), CAST(%s AS text[]), CAST(%s AS text[])) '
            'AS u(z, t, s, n, m, c, j)' + _pg_upsert(
                mode, 'state_size', 'class_module', 'class_name', 'json'),
            (zoids, tids, states, sizes, modules, names, texts))]
    out = [(
        'INSERT INTO object_state (zoid, tid, state, state_size) '
        'SELECT * FROM unnest(CAST(%s AS bigint[]), CAST(%s AS bigint[]), '
        'CAST(%s AS bytea[]), CAST(%s AS bigint[]))'
        + _pg_upsert(mode, 'state_size'),
        (zoids, tids, states, sizes))]
    if layout == 'table, text arrays':
        out.append((
            'INSERT INTO object_json (zoid, tid, class_module, class_name, '
            'state) SELECT z, t, m, c, CAST(j AS jsonb) FROM unnest('
            'CAST(%s AS bigint[]), CAST(%s AS bigint[]), '
            'CAST(%s AS text[]), CAST(%s AS text[]), CAST(%s AS text[])) '
            'AS u(z, t, m, c, j)' + _JSON_UPSERT,
            (zoids, tids, modules, names, texts)))
    elif layout.startswith('table'):
        # The mirror's form: one JSON array, the states in it as they are.
        array = '[' + ','.join(
            f'[{z},{t},{json.dumps(m)},{json.dumps(c)},{j or "null"}]'
            for z, t, m, c, j in zip(zoids, tids, modules, names, texts)
        ) + ']'
        out.append((
            'INSERT INTO object_json (zoid, tid, class_module, class_name, '
            'state) SELECT CAST(e->>0 AS bigint), CAST(e->>1 AS bigint), '
            "e->>2, e->>3, NULLIF(e->4, 'null'::jsonb) "
            'FROM jsonb_array_elements(CAST(%s AS jsonb)) e'
            + _JSON_UPSERT, (array,)))
    return out


def _upsert(mode, head, value, *more):
    """History-free: a commit replaces the object's row (``head``: the
    database's clause, ``value``: how it names a column's new value)."""
    if mode == 'hp':
        return ''
    return head + ', '.join(f'{c} = {value.format(c)}'
                            for c in ('tid', 'state', *more))


def _pg_upsert(mode, *more):
    return _upsert(mode, ' ON CONFLICT (zoid) DO UPDATE SET ',
                   'excluded.{}', *more)


#: The mirror keeps the current revision's row only, in both modes.
_JSON_UPSERT = (' ON CONFLICT (zoid) DO UPDATE SET tid = excluded.tid, '
                'class_module = excluded.class_module, '
                'class_name = excluded.class_name, state = excluded.state')


# -- MariaDB -------------------------------------------------------------

def mysql_tables(layout, mode):
    key = '(zoid, tid)' if mode == 'hp' else '(zoid)'
    extra = (', class_module VARCHAR(255), class_name VARCHAR(255), '
             'json JSON' if layout == 'same row' else '')
    tid_key = ', KEY object_state_tid (tid)' if mode == 'hp' else ''
    out = [f'CREATE TABLE object_state (zoid BIGINT NOT NULL, '
           f'tid BIGINT NOT NULL, state LONGBLOB, '
           f'state_size BIGINT NOT NULL{extra}, PRIMARY KEY {key}{tid_key}'
           f') ENGINE = InnoDB']
    if layout.startswith('table'):
        index = ('' if layout == 'table, no class index' else
                 ', KEY object_json_class (class_name, class_module)')
        out.append('CREATE TABLE object_json (zoid BIGINT NOT NULL PRIMARY '
                   'KEY, tid BIGINT NOT NULL, class_module VARCHAR(255), '
                   f'class_name VARCHAR(255), state JSON{index}) '
                   'ENGINE = InnoDB')
    return out


def mysql_statements(layout, mode, rows):
    # Rows of values (MySQLdb's executemany makes one statement of them).
    if layout == 'same row':
        return [('INSERT INTO object_state (zoid, tid, state, state_size, '
                 'class_module, class_name, json) '
                 'VALUES (%s, %s, %s, %s, %s, %s, %s)' + _mysql_upsert(
                     mode, 'state_size', 'class_module', 'class_name',
                     'json'),
                 [(z, t, s, len(s), m, c, j) for z, t, s, m, c, j in rows])]
    out = [('INSERT INTO object_state (zoid, tid, state, state_size) '
            'VALUES (%s, %s, %s, %s)' + _mysql_upsert(mode, 'state_size'),
            [(z, t, s, len(s)) for z, t, s, _, _, _ in rows])]
    if layout.startswith('table'):
        out.append(('INSERT INTO object_json (zoid, tid, class_module, '
                    'class_name, state) VALUES (%s, %s, %s, %s, %s) '
                    'ON DUPLICATE KEY UPDATE tid = VALUES(tid), '
                    'class_module = VALUES(class_module), '
                    'class_name = VALUES(class_name), '
                    'state = VALUES(state)',
                    [(z, t, m, c, j) for z, t, _, m, c, j in rows]))
    return out


def _mysql_upsert(mode, *more):
    return _upsert(mode, ' ON DUPLICATE KEY UPDATE ', 'VALUES({})', *more)


# -- the runs ------------------------------------------------------------

def connect(database, backend, name):
    if backend == 'postgresql':
        return database.psycopg2.connect(database.dsn(name))
    return database.MySQLdb.connect(
        host=database.host, port=database.port, user=database.user,
        passwd=database.passwd, db=name)


def run(database, backend, mode, layout, txns):
    """Seconds to write ``txns`` in ``layout`` on a fresh database."""
    name = 'mirrorfloor'
    database.create(name)
    conn = connect(database, backend, name)
    try:
        cur = conn.cursor()
        tables = pg_tables if backend == 'postgresql' else mysql_tables
        for statement in tables(layout, mode):
            cur.execute(statement)
        conn.commit()
        statements = (pg_statements if backend == 'postgresql'
                      else mysql_statements)
        # (The statements' parameters are built outside the timing: a
        # commit has its rows at hand in that form.)
        prepared = [statements(layout, mode, rows) for rows in txns]
        started = perf()
        for txn in prepared:
            for sql, params in txn:
                if backend == 'postgresql':
                    cur.execute(sql, params)
                else:
                    cur.executemany(sql, params)
            conn.commit()
        return perf() - started
    finally:
        conn.close()
        database.drop(name)


def main(argv=None):
    parser = Parser(__doc__.splitlines()[0])
    parser.choice('backends', ('postgresql', 'mysql'))
    parser.choice('modes', MODES, default='hp,hf')
    parser.scaled('--documents', 5000, 500)
    parser.add_argument('--batch', type=int, default=100)
    parser.repeat(3)
    parser.quick()
    parser.servers(sqlite_synchronous=False)
    parser.results('mirror-floor.json', 'mirror-floor-quick.json',
                   keep_data=False)
    args = parser.parse(argv)
    databases = {b: backends.database_for(b, args) for b in args.backends}
    env = environment({b: d.server_version() for b, d in databases.items()},
                      {})
    log('the rows: the add phase committed to a FileStorage, rendered')
    txns = transactions(args.documents, args.batch)
    records = sum(len(rows) for rows in txns)
    json_chars = sum(len(r[5] or '') for rows in txns for r in rows)
    pickle_bytes = sum(len(r[2]) for rows in txns for r in rows)
    lines = heading(env) + [
        f'{len(txns)} transactions, {records:,} records: pickles '
        f'{pickle_bytes / 1e6:.1f} MB, JSON {json_chars / 1e6:.1f} M '
        f'characters.', '']
    show(lines)
    results, rows = {}, []
    for backend, database in databases.items():
        layouts = [layout for layout in LAYOUTS
                   if backend == 'postgresql' or layout != 'table, text arrays']
        for mode in args.modes:
            times = {layout: [] for layout in layouts}
            for round_ in range(args.repeat):
                order = layouts if round_ % 2 == 0 else layouts[::-1]
                for layout in order:
                    times[layout].append(run(database, backend, mode,
                                             layout, txns))
                    log(f'{TITLES[backend]} {mode} {layout}: '
                        f'{times[layout][-1]:.2f}s')
            fastest = {k: best(v, lowest=True) for k, v in times.items()}
            base = fastest['pickles']
            extra_table = fastest['table'] - base
            cell = results.setdefault(backend, {})[mode] = {}
            for layout in layouts:
                extra = fastest[layout] - base
                cell[layout] = {'seconds': fastest[layout],
                                'runs': times[layout],
                                'extra_seconds': extra,
                                'extra_us_per_record': extra / records * 1e6}
                rows.append((TITLES[backend], mode, layout,
                             f'{fastest[layout]:.2f} s',
                             f'{extra:+.2f} s' if layout != 'pickles'
                             else '',
                             f'{extra / records * 1e6:.1f} us'
                             if layout != 'pickles' else '',
                             f'{extra / extra_table:.2f}'
                             if layout != 'pickles' and extra_table > 0
                             else ''))
    tail = ['', f'Best of {args.repeat} per layout; "beyond": the time past '
                f'"pickles", per record; "of table": that as a share of '
                f'the layout json-state has.', '']
    tail += render(('database', 'mode', 'layout', 'time', 'beyond',
                    'per record', 'of table'), rows, right_from=3)
    show(tail)
    write_results(args.json, {
        'environment': finish(env),
        'settings': {k: getattr(args, k) for k in (
            'backends', 'modes', 'documents', 'batch', 'repeat', 'quick')},
        'records': records, 'pickle_bytes': pickle_bytes,
        'json_chars': json_chars, 'results': results,
        'report': '\n'.join(lines + tail)})
    return 0


if __name__ == '__main__':
    sys.exit(main())
