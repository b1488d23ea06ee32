"""Where the time of a phase goes: SQL statements per operation and time
spent waiting for the database, for either implementation.

    python benchmarks/trace.py --impl ours --backend postgresql --mode hp
    python benchmarks/trace.py --impl ref --backend sqlite --mode hf --profile
    python benchmarks/trace.py --impl ref --backend mysql --mode hp

Not part of the benchmark run (the wrappers cost time themselves): a tool
for explaining its figures.  It wraps the driver's cursors (psycopg2,
sqlite3 or mysqlclient) in the workload process, runs a small version of
the workload (add, update, small commits, cold read through a new
storage), and prints
per phase the wall time, the statements sent and the time spent inside
``execute``, with the statements that took most of it.  ``--profile``
adds the top of a cProfile of the same phases.
"""
import argparse
import collections
import cProfile
import io
import pstats
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

perf = time.perf_counter


class Tally:
    def __init__(self):
        self.reset()

    def reset(self):
        self.count = collections.Counter()
        self.seconds = collections.Counter()

    def add(self, statement, seconds):
        key = re.sub(r'\s+', ' ', str(statement)).strip()[:110]
        self.count[key] += 1
        self.seconds[key] += seconds


TALLY = Tally()


def _timed(method):
    def wrapper(self, statement, *args, **kwargs):
        start = perf()
        try:
            return method(self, statement, *args, **kwargs)
        finally:
            TALLY.add(statement, perf() - start)
    return wrapper


def wrap_drivers():
    """Make every connection either implementation opens count and time
    its statements."""
    import sqlite3

    class TracingCursor(sqlite3.Cursor):
        execute = _timed(sqlite3.Cursor.execute)
        executemany = _timed(sqlite3.Cursor.executemany)

    class TracingConnection(sqlite3.Connection):
        def cursor(self, factory=TracingCursor):
            return super().cursor(factory)

        def execute(self, statement, *args):
            return self.cursor().execute(statement, *args)

        def executemany(self, statement, *args):
            return self.cursor().executemany(statement, *args)

    connect = sqlite3.connect

    def tracing_connect(*args, **kwargs):
        kwargs.setdefault('factory', TracingConnection)
        return connect(*args, **kwargs)
    sqlite3.connect = tracing_connect

    try:
        import MySQLdb.connections
        import MySQLdb.cursors
    except ImportError:
        pass
    else:
        # Both implementations use mysqlclient's own classes: wrap them in
        # place (only in this process).
        cursor = MySQLdb.cursors.BaseCursor
        for name in ('execute', 'executemany'):
            setattr(cursor, name, _timed(getattr(cursor, name)))
        connection = MySQLdb.connections.Connection
        for name in ('commit', 'rollback'):
            method = getattr(connection, name)

            def timed(self, method=method, name=name):
                start = perf()
                try:
                    return method(self)
                finally:
                    TALLY.add(f'connection.{name}()', perf() - start)
            setattr(connection, name, timed)

    try:
        import psycopg2
        import psycopg2.extensions
    except ImportError:
        return

    class TracingPgCursor(psycopg2.extensions.cursor):
        execute = _timed(psycopg2.extensions.cursor.execute)
        executemany = _timed(psycopg2.extensions.cursor.executemany)
        copy_expert = _timed(psycopg2.extensions.cursor.copy_expert)

    pg_connect = psycopg2.connect

    def tracing_pg_connect(*args, **kwargs):
        kwargs.setdefault('cursor_factory', TracingPgCursor)
        return pg_connect(*args, **kwargs)
    psycopg2.connect = tracing_pg_connect

    # RelStorage 4.3 instantiates a connection class of its own, which it
    # looks up on the psycopg2 module: give it one that traces.
    base = psycopg2.extensions.connection

    class TracingPgConnection(base):
        __slots__ = ('replica',)

        def cursor(self, *args, **kwargs):
            kwargs.setdefault('cursor_factory', TracingPgCursor)
            return super().cursor(*args, **kwargs)

        def commit(self):
            start = perf()
            try:
                return base.commit(self)
            finally:
                TALLY.add('connection.commit()', perf() - start)

        def rollback(self):
            start = perf()
            try:
                return base.rollback(self)
            finally:
                TALLY.add('connection.rollback()', perf() - start)
    psycopg2.RSPsycopg2Connection = TracingPgConnection


def wrap_reference_sqlite():
    """RelStorage 4.3 opens SQLite connections and cursors of its own
    classes: wrap their methods in place (only in this process)."""
    try:
        from relstorage.adapters.sqlite import drivers
    except ImportError:
        return
    cursor, conn = drivers.Cursor, drivers.Connection
    for cls, name in ((cursor, 'execute'), (cursor, 'executemany'),
                      (conn, 'execute'), (conn, 'executemany')):
        setattr(cls, name, _timed(getattr(cls, name)))
    for name in ('commit', 'rollback'):
        method = getattr(conn, name)

        def timed(self, method=method, name=name):
            start = perf()
            try:
                return method(self)
            finally:
                TALLY.add(f'connection.{name}()', perf() - start)
        setattr(conn, name, timed)


def report(name, operations, wall, profile=None, top=8):
    total = sum(TALLY.count.values())
    in_db = sum(TALLY.seconds.values())
    print(f'\n{name}: {operations} operations, {wall * 1000:.1f} ms wall, '
          f'{total} statements ({total / operations:.2f}/op), '
          f'{in_db * 1000:.1f} ms in execute '
          f'({100 * in_db / wall:.0f}% of wall)')
    for key, seconds in TALLY.seconds.most_common(top):
        print(f'  {TALLY.count[key]:6d}x {seconds * 1000:8.1f} ms  {key}')
    if profile is not None:
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats('tottime').print_stats(
            15)
        print('\n'.join('    ' + line for line in
                        out.getvalue().splitlines()[6:30]))
    TALLY.reset()


def phase(name, operations, function, profiling):
    TALLY.reset()
    profile = cProfile.Profile() if profiling else None
    start = perf()
    if profile:
        profile.enable()
    function()
    if profile:
        profile.disable()
    report(name, operations, perf() - start, profile)


def traced(args):
    if args.patch_mariadb:
        import mariadb_patch
        mariadb_patch.apply()
    wrap_drivers()
    import transaction
    import ZODB
    import ZODB.config
    from BTrees.OOBTree import OOBTree
    import workload
    if args.impl == 'ref':
        wrap_reference_sqlite()
    print(f'relstorage: {workload.identify(args.expect_under)["relstorage"]}'
          f' ({args.impl}), {args.backend}, {args.mode}')

    def open_db():
        storage = ZODB.config.storageFromString(args.zconfig)
        return ZODB.DB(storage, cache_size=4 * args.objects + 1000)

    db = open_db()
    conn = db.open()
    root = conn.root()
    transaction.begin()
    root['tree'] = tree = OOBTree()
    root['counter'] = counter = workload.Counter()
    transaction.commit()
    keys = workload.keys_for('a', args.objects)

    def add(per_txn):
        def run():
            for first in range(0, len(keys), per_txn):
                transaction.begin()
                for key in keys[first:first + per_txn]:
                    tree[key] = workload.Item(key)
                transaction.commit()
        return run

    half = len(keys) // 2
    all_keys, keys = keys, keys[:half]
    phase('add, 100 per transaction', len(keys), add(100), args.profile)
    keys = all_keys[half:]
    phase('add, 1000 per transaction', len(keys), add(1000), args.profile)
    keys = all_keys

    def update():
        items = list(tree.values())
        for first in range(0, len(items), 1000):
            transaction.begin()
            for item in items[first:first + 1000]:
                item.bump()
            transaction.commit()
    phase('update, 1000 per transaction', len(keys), update, args.profile)

    def small_commits():
        for _ in range(args.commits):
            transaction.begin()
            counter.value += 1
            transaction.commit()
    phase('small commits', args.commits, small_commits, args.profile)
    conn.close()
    db.close()

    db = open_db()   # a new storage: its caches are empty
    conn = db.open()

    def cold_read():
        transaction.begin()
        for key, item in conn.root()['tree'].items():
            workload.check_item(key, item, 1)
    phase('cold read, new storage', len(all_keys), cold_read, args.profile)
    transaction.abort()
    conn.close()
    db.close()


def main():
    from harness import backends
    from harness.cli import Parser
    from harness.sides import Side
    from harness.venvs import clean_env, reference
    parser = Parser(__doc__.splitlines()[0])
    parser.add_argument('--impl', choices=('ours', 'ref'), default='ours')
    parser.add_argument('--backend', choices=backends.BACKENDS,
                        default='postgresql')
    parser.add_argument('--mode', choices=tuple(backends.MODES),
                        default='hp')
    parser.add_argument('--objects', type=int, default=2000)
    parser.add_argument('--commits', type=int, default=100)
    parser.add_argument('--profile', action='store_true')
    parser.servers()
    # Set when this script re-runs itself under the chosen interpreter.
    parser.add_argument('--zconfig', help=argparse.SUPPRESS)
    parser.add_argument('--expect-under', help=argparse.SUPPRESS)
    parser.add_argument('--patch-mariadb', action='store_true',
                        help=argparse.SUPPRESS)
    args = parser.parse()
    if args.zconfig:
        return traced(args)
    if args.impl == 'ref':
        reference()
    database = backends.database_for(args.backend, args)
    store = backends.fresh_relstorage(database, f'trace_{args.impl}',
                                      args.mode)
    side = Side(args.impl, args.backend)
    try:
        subprocess.run(
            [side.python, '-I', __file__] + sys.argv[1:] +
            ['--zconfig', store.zconfig, '--expect-under', str(side.home)]
            + side.flags, env=clean_env(), check=True)
    finally:
        store.close()


if __name__ == '__main__':
    sys.exit(main())
