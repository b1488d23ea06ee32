"""What storage.metrics() costs: the counting on the paths it is on, set
against the time of those paths, in one run.

    .venv/bin/python benchmarks/metrics_cost.py [--objects 20000]

On a SQLite storage (history-free, in a temporary directory) it times
loads answered by the storage's shared cache (the cheapest path that
counts: one ``loads`` increment each), polls, and small commits (one
object each: the increments of tpc_vote, tpc_finish and the commit's
bookkeeping), then the counting alone: the same increments on the
storage's own ``Counters`` object (and ``Counters.committed`` on a
transaction of the size committed), repeated as often.  It prints the
environment and, per path, its time per operation, the counting's, and
the share, and writes them to ``benchmarks/results/metrics_cost.json``
(``--json``).  The counting
is the only work metrics add to these paths (``Metrics.totals`` runs only
when asked).
"""
import shutil
import sqlite3
import sys
import tempfile
import time

from harness import SRC
from harness.cli import Parser
from harness.environment import environment, finish
from harness.figures import best
from harness.report import heading, render, show, write_results

sys.path.insert(0, str(SRC))

perf = time.perf_counter


def timed(repeat, function):
    """The best of ``repeat`` runs of ``function``, in seconds."""
    times = []
    for _ in range(repeat):
        started = perf()
        function()
        times.append(perf() - started)
    return best(times, lowest=True)


def main(argv=None):
    parser = Parser(__doc__.splitlines()[0])
    parser.add_argument('--objects', type=int, default=20000)
    parser.add_argument('--commits', type=int, default=300)
    parser.repeat(5, help='runs of each path; the best is shown (default '
                  '5)')
    parser.results('metrics_cost.json', keep_data=False)
    args = parser.parse(argv)
    env = environment({'sqlite': sqlite3.sqlite_version})

    import transaction
    import ZODB
    from persistent.mapping import PersistentMapping

    from relstorage.adapters.sqlite import SQLiteAdapter
    from relstorage.storage import RelStorage

    directory = tempfile.mkdtemp(prefix='relstorage-metrics-')
    try:
        storage = RelStorage(SQLiteAdapter(data_dir=directory),
                             keep_history=False, cache_local_mb=100)
        db = ZODB.DB(storage)
        conn = db.open()
        root = conn.root()
        for index in range(args.objects):
            root[index] = PersistentMapping({'n': index})
            if index % 1000 == 999:
                transaction.commit()
        transaction.commit()
        oids = [root[index]._p_oid for index in range(args.objects)]
        conn.close()

        instance = storage.new_instance()
        instance.poll_invalidations()
        for oid in oids:            # into the shared cache
            instance.load(oid)

        def loads():
            for oid in oids:
                instance.load(oid)

        def polls():
            for _ in range(1000):
                instance.poll_invalidations()

        def commits():
            conn = db.open()
            target = conn.root()[0]
            for index in range(args.commits):
                target['n'] = index
                transaction.commit()
            conn.close()

        counters = instance._counters

        def count_loads():
            for _ in oids:
                counters.loads += 1

        def count_polls():
            changes = ()
            for _ in range(1000):
                counters.polls += 1
                counters.invalidations += len(changes or ())

        class Txn:
            started = time.monotonic()
            lock_wait = 0.001
            resolved = []
            written = 100

            def stored(self):
                return 1
        txn = Txn()

        def count_commits():
            for _ in range(args.commits):
                counters.committed(txn)

        rows = []
        for label, work, count, per in (
                ('load from the shared cache', loads, count_loads,
                 len(oids)),
                ('poll (nothing changed)', polls, count_polls, 1000),
                ('small commit (one object)', commits, count_commits,
                 args.commits)):
            rows.append((label, timed(args.repeat, work) / per,
                         timed(args.repeat, count) / per))
        db.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    lines = heading(finish(env)) + [
        f'SQLite, history-free, {args.objects} objects, {args.commits} '
        f'commits; best of {args.repeat} runs.', ''] + render(
        ('path', 'per op', 'counting', 'share'),
        [(label, f'{op * 1e6:.2f} us', f'{counting * 1e9:.0f} ns',
          f'{counting / op * 100:.2f} %') for label, op, counting in rows],
        right_from=1)
    show(lines)
    write_results(args.json, {
        'environment': env,
        'settings': {'objects': args.objects, 'commits': args.commits,
                     'repeat': args.repeat},
        'results': {label: {'seconds_per_op': op,
                            'counting_seconds_per_op': counting}
                    for label, op, counting in rows},
        'report': '\n'.join(lines)})
    return 0


if __name__ == '__main__':
    sys.exit(main())
