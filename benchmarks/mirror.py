"""What the JSON mirror (json-state) costs: the renderer's speed on
Plone-like states, commits with and without it, and the disk it takes.

    .venv/bin/python benchmarks/mirror.py [--backends sqlite,postgresql,mysql]
        [--modes hp,hf] [--documents 5000] [--batch 100] [--repeat 2]

1. The renderer (``relstorage.mirror.render``), in this process, on the
   records of mirror_content.py's states: a Dexterity-like document, a
   catalog's metadata bucket, a catalog index (words to sets of record
   ids) and a folder of 1,000 items; the best of ``--repeat`` x 200
   renders each, against the baseline of the same run: unpickling the
   same record as a ZODB connection loads it (``ObjectReader.getState``,
   the real classes).
2. Commits, per backend and history mode, on fresh databases, without
   and with ``json-state`` in turn (ABBA over ``--repeat`` rounds):
   ``add``, ``--documents`` documents into a folder in commits of
   ``--batch``; ``update``, a new title and modification date for each,
   in commits of ``--batch``.  The best time of each phase per side, and
   with/without (target: at most 1.25).  A third side, ``free``, commits
   with ``json-state`` but with every rendering done beforehand (the
   commit's renderer answers from a table filled by an untimed run of the
   same phases): what the database's part of the mirror costs, the floor
   that no renderer, however fast, goes below.
3. The disk: ``object_json`` and ``object_state`` (with their indexes)
   after the phases, on the last database with the mirror (PostgreSQL
   ``pg_total_relation_size``, InnoDB's allocated tablespace, SQLite's
   ``dbstat`` where it is compiled in).

Results go to ``benchmarks/results/mirror.json`` (``--json``).
"""
import contextlib
import datetime
import sys
import time
from pathlib import Path

import mirror_content
from harness import backends
from harness.backends import MODES, TITLES, relstorage_zconfig
from harness.cli import Parser
from harness.environment import environment, finish
from harness.figures import best
from harness.report import heading, log, render, show, write_results
from harness.sides import prepare

HERE = Path(__file__).resolve().parent
TARGET = 1.25
perf = time.perf_counter


# -- the renderer --------------------------------------------------------

def records():
    """``{label: record bytes}`` of the states, written by ZODB."""
    import transaction
    import ZODB
    from ZODB.MappingStorage import MappingStorage
    from ZODB.utils import load_current
    rng = mirror_content.seeded(1)
    db = ZODB.DB(MappingStorage())
    conn = db.open()
    root = conn.root()
    when = datetime.datetime(2026, 11, 28, 4, 15)
    objects = {
        'Dexterity document': mirror_content.document(rng, 1, when),
        'catalog metadata bucket (60 records)':
            mirror_content.catalog_bucket(rng, 1000),
        'catalog index (18 words to id sets)':
            mirror_content.index_tree(rng),
        'folder of 1,000 items': mirror_content.folder(1000),
    }
    for index, obj in enumerate(objects.values()):
        root[index] = obj
    transaction.commit()
    found = {label: load_current(db.storage, obj._p_oid)[0]
             for label, obj in objects.items()}
    reader = conn._reader
    return found, reader, db, conn


def time_renderer(repeat):
    from relstorage.mirror.render import render
    found, reader, db, conn = records()
    rows = []
    try:
        for label, data in found.items():
            rendered = render(data)
            assert rendered.error is None, (label, rendered.error)

            def many(work, data=data):
                started = perf()
                for _ in range(200):
                    work(data)
                return (perf() - started) / 200
            ours = best([many(render) for _ in range(repeat)], lowest=True)
            loads = best([many(reader.getState) for _ in range(repeat)],
                         lowest=True)
            rows.append({'state': label, 'record_bytes': len(data),
                         'json_chars': len(rendered.json),
                         'render_us': ours * 1e6, 'unpickle_us': loads * 1e6,
                         'mb_per_s': len(data) / ours / 1e6})
    finally:
        conn.close()
        db.close()
    return rows


# -- commits -------------------------------------------------------------

class FreeRenderer:
    """Stands in for the commit's renderer (``relstorage.storage.commit.
    render``): the renderings of states it has seen, so that a second run
    of the same phases renders nothing.  ``misses`` counts the states it
    had to render."""

    def __init__(self):
        import relstorage.storage.commit as commit
        self.module, self.real = commit, commit.render
        self.memo, self.misses = {}, 0

    def __call__(self, state):
        found = self.memo.get(state)
        if found is None:
            self.misses += 1
            found = self.memo[state] = self.real(state)
        return found

    def __enter__(self):
        self.module.render = self
        return self

    def __exit__(self, *exc):
        self.module.render = self.real


def phases(config, args):
    """Seconds of the add and update phases on the storage of
    ``config``."""
    import transaction
    import ZODB
    import ZODB.config
    db = ZODB.DB(ZODB.config.storageFromString(config))
    try:
        conn = db.open()
        root = conn.root()
        rng = mirror_content.seeded(2)
        when = datetime.datetime(2026, 11, 28)
        root['folder'] = box = mirror_content.folder(0)
        transaction.commit()
        started = perf()
        for number in range(args.documents):
            box._tree[f'document-{number}'] = mirror_content.document(
                rng, number, when)
            if number % args.batch == args.batch - 1:
                transaction.commit()
                conn.cacheGC()
        transaction.commit()
        add = perf() - started
        started = perf()
        for number, doc in enumerate(box._tree.values()):
            doc.title = mirror_content.words(rng, 3, 8)
            doc.modification_date = when + datetime.timedelta(days=1)
            if number % args.batch == args.batch - 1:
                transaction.commit()
                conn.cacheGC()
        transaction.commit()
        update = perf() - started
        conn.close()
        return {'add': add, 'update': update}
    finally:
        db.close()


def table_bytes(database, backend, name):
    """``{table: bytes}`` of object_json and object_state, or {}."""
    conn, tables, _ = backends.open_tables(database, backend, name)
    out = {}
    try:
        cur = conn.cursor()
        for table in ('object_json', 'object_state'):
            if backend == 'postgresql':
                cur.execute('SELECT pg_total_relation_size(%s)', (table,))
            elif backend == 'mysql':
                cur.execute(
                    'SELECT SUM(allocated_size) FROM '
                    'information_schema.innodb_sys_tablespaces '
                    'WHERE name = %s', (f'{name}/{table}',))
            else:
                try:
                    cur.execute('SELECT SUM(pgsize) FROM dbstat WHERE name '
                                'LIKE ?', (f'%{table}%',))
                except Exception:   # dbstat not compiled in
                    return {}
            out[table] = int(cur.fetchone()[0] or 0)
    finally:
        conn.close()
    return out


def commits(backend, database, mode, args):
    timings = {'off': [], 'on': [], 'free': []}
    sizes = {}
    free = FreeRenderer()

    def run(side):
        name = f'mirrorbench_{side}_{mode}'
        database.drop(name)
        database.create(name)
        options = ['json-state true'] if side != 'off' else []
        config = relstorage_zconfig(database, 'ours', name,
                                    MODES[mode][1], options)
        with free if side == 'free' else contextlib.nullcontext():
            timed = phases(config, args)
        if side == 'on':
            sizes.update(table_bytes(database, backend, name))
        database.drop(name)
        return timed

    # Untimed: the free renderer's table filled.
    run('free')
    free.misses = 0
    for round_ in range(args.repeat):
        # ABC, CBA...: no side always meets the machine as another left it.
        order = ('off', 'on', 'free')
        for side in order if round_ % 2 == 0 else order[::-1]:
            timings[side].append(run(side))
            log(f'{TITLES[backend]} {mode} json-state {side}: add '
                f'{timings[side][-1]["add"]:.2f}s, update '
                f'{timings[side][-1]["update"]:.2f}s')
    out = {'free_renderer_misses': free.misses}
    for phase in ('add', 'update'):
        off, on, floor = (best([t[phase] for t in timings[side]],
                               lowest=True)
                          for side in ('off', 'on', 'free'))
        out[phase] = {'off_seconds': off, 'on_seconds': on,
                      'ratio': on / off, 'free_seconds': floor,
                      'free_ratio': floor / off}
    return out, sizes


def main(argv=None):
    parser = Parser(__doc__.splitlines()[0])
    parser.choice('backends', ('sqlite', 'postgresql', 'mysql'))
    parser.choice('modes', MODES, default='hp,hf')
    parser.scaled('--documents', 5000, 500)
    parser.add_argument('--batch', type=int, default=100)
    parser.repeat(2)
    parser.quick()
    parser.servers(sqlite_synchronous=False)
    parser.results('mirror.json', 'mirror-quick.json', keep_data=False)
    args = parser.parse(argv)
    sys.path.insert(0, str(HERE))
    probes = prepare(['ours'], HERE / 'workload.py', log)
    databases = {b: backends.database_for(b, args) for b in args.backends}
    env = environment({b: d.server_version() for b, d in databases.items()},
                      probes)
    log('the renderer')
    renderer = time_renderer(max(args.repeat, 3))
    lines = heading(env) + ['The renderer (best of runs of 200):', '']
    lines += render(
        ('state', 'record', 'JSON', 'render', 'unpickle', 'ratio', 'MB/s'),
        [(r['state'], f'{r["record_bytes"]:,} B', f'{r["json_chars"]:,}',
          f'{r["render_us"]:.0f} us', f'{r["unpickle_us"]:.0f} us',
          f'{r["render_us"] / r["unpickle_us"]:.1f}',
          f'{r["mb_per_s"]:.1f}') for r in renderer], right_from=1)
    show(lines)
    results, rows, checks = {}, [], []
    for backend, database in databases.items():
        for mode in args.modes:
            timed, sizes = commits(backend, database, mode, args)
            results.setdefault(backend, {})[mode] = {'commits': timed,
                                                    'bytes': sizes}
            for phase in ('add', 'update'):
                figures = timed[phase]
                ok = figures['ratio'] <= TARGET
                checks.append({'where': f'{TITLES[backend]} {mode}',
                               'label': phase, 'ratio': figures['ratio'],
                               'ok': ok})
                rows.append((TITLES[backend], mode, phase,
                             f'{figures["off_seconds"]:.2f} s',
                             f'{figures["on_seconds"]:.2f} s',
                             f'{figures["ratio"]:.2f}',
                             'ok' if ok else 'MISS',
                             f'{figures["free_seconds"]:.2f} s',
                             f'{figures["free_ratio"]:.2f}',
                             (f'{sizes["object_json"] / 1e6:.1f} / '
                              f'{sizes["object_state"] / 1e6:.1f} MB')
                             if sizes and phase == 'add' else ''))
    tail = ['', f'Commits: {args.documents:,} documents in commits of '
                f'{args.batch}, best of {args.repeat} rounds per side; '
                f'target: with/without at most {TARGET}.  "free": with '
                f'the mirror, every state rendered beforehand (the '
                f'database\'s part alone).', '']
    tail += render(('database', 'mode', 'phase', 'without', 'with',
                    'ratio', 'target', 'free', 'ratio',
                    'object_json / object_state'),
                   rows, right_from=3)
    missed = [f'{TITLES[b]} {m}: {cell["commits"]["free_renderer_misses"]}'
              for b, modes in results.items() for m, cell in modes.items()
              if cell['commits']['free_renderer_misses']]
    if missed:
        # The phases' states differed from the untimed run's: the free
        # side rendered some of them, so its figure is above the floor.
        tail += ['', 'States the free side had to render (its figure is '
                     'then above the floor): ' + ', '.join(missed)]
    show(tail)
    write_results(args.json, {
        'environment': finish(env),
        'settings': {k: getattr(args, k) for k in (
            'backends', 'modes', 'documents', 'batch', 'repeat', 'quick')},
        'renderer': renderer, 'results': results, 'checks': checks,
        'report': '\n'.join(lines + tail)})
    return 0 if all(c['ok'] for c in checks) else 1


if __name__ == '__main__':
    sys.exit(main())
