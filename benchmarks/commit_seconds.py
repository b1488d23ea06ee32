"""What recording each commit's seconds costs a commit (schema step
0008-commit-time: ``commit_row.commit_seconds``, which a pack's watch
reads), in one run.

    .venv/bin/python benchmarks/commit_seconds.py [--backends postgresql,mysql]

On a fresh history-preserving database per backend, one process commits
small transactions (one object changed each) in alternating blocks: with
the seconds recorded, as every commit records them, and without
(``PendingTransaction.recorded_seconds`` made to say None: the column
is written NULL).  The record is a column more in the UPDATE that moves
the tid (on PostgreSQL in the finish functions of step 0008, on MariaDB
and MySQL in the one that takes the commit lock), so the difference is
server work, no round trip.  It prints each side's median time per
commit over the blocks and their ratio, and writes them to
``benchmarks/results/commit_seconds.json`` (``--json``).
"""
import statistics
import sys
import time

from harness import SRC
from harness.backends import database_for
from harness.backends import fresh_relstorage
from harness.cli import Parser
from harness.environment import environment, finish
from harness.report import heading, render, show, write_results

sys.path.insert(0, str(SRC))

BACKENDS = ('postgresql', 'mysql')


def blocks(db, commits, rounds):
    """Per side, the seconds per commit of each block."""
    import transaction

    from relstorage.storage import commit as commit_module
    recorded = commit_module.PendingTransaction.recorded_seconds
    sides = {'recorded': recorded, 'not recorded': lambda self: None}
    found = {side: [] for side in sides}
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    root = conn.root()
    from persistent.mapping import PersistentMapping
    root['target'] = target = PersistentMapping(n=0)
    tm.commit()
    try:
        for index in range(rounds):
            # Each round in both orders in turn (what the server does in
            # the background drifts).
            order = list(sides) if index % 2 == 0 else list(sides)[::-1]
            for side in order:
                commit_module.PendingTransaction.recorded_seconds = \
                    sides[side]
                started = time.perf_counter()
                for count in range(commits):
                    target['n'] = count
                    tm.commit()
                found[side].append((time.perf_counter() - started) / commits)
    finally:
        commit_module.PendingTransaction.recorded_seconds = recorded
        conn.close()
    return found


def main(argv=None):
    parser = Parser(__doc__.splitlines()[0])
    parser.choice('backends', BACKENDS)
    parser.add_argument('--commits', type=int, default=500,
                        help='commits per block (default 500)')
    parser.add_argument('--rounds', type=int, default=10,
                        help='blocks per side (default 10)')
    parser.servers(sqlite_synchronous=False)
    parser.results('commit_seconds.json', keep_data=False)
    args = parser.parse(argv)
    env = environment({})

    import ZODB
    import ZODB.config

    rows, results = [], {}
    for backend in args.backends:
        database = database_for(backend, args)
        store = fresh_relstorage(database, 'ours', 'hp', 'commit_seconds')
        try:
            storage = ZODB.config.storageFromString(store.zconfig)
            db = ZODB.DB(storage)
            try:
                found = blocks(db, args.commits, args.rounds)
            finally:
                db.close()
        finally:
            store.close()
        with_, without = (statistics.median(found[side])
                          for side in ('recorded', 'not recorded'))
        results[backend] = {'recorded': found['recorded'],
                            'not_recorded': found['not recorded'],
                            'median_recorded': with_,
                            'median_not_recorded': without}
        rows.append((backend, f'{with_ * 1e3:.3f} ms',
                     f'{without * 1e3:.3f} ms', f'{with_ / without:.3f}'))
    lines = heading(finish(env)) + [
        f'History-preserving, one object changed per commit; {args.rounds} '
        f'blocks of {args.commits} commits per side, alternating; '
        f'medians of the blocks.', ''] + render(
        ('database', 'recorded', 'not recorded', 'ratio'), rows,
        right_from=1)
    show(lines)
    write_results(args.json, {
        'environment': env,
        'settings': {'commits': args.commits, 'rounds': args.rounds,
                     'backends': list(args.backends)},
        'results': results, 'report': '\n'.join(lines)})
    return 0


if __name__ == '__main__':
    sys.exit(main())
