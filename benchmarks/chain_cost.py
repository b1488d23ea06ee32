"""What the commit chain costs MariaDB/MySQL's commits and polls (schema
step 0009-commit-chain: every commit adds a link, every snapshot's first
read checks the links; src/relstorage/adapters/mysql/chain.py), in one run.

    .venv/bin/python benchmarks/chain_cost.py [--modes hp,hf] [--polls N]

On a fresh database per history mode, one process commits small
transactions (one object changed each) while a second connection polls
after each commit (``--polls`` times: a request of the soak's workload
polls three times, one of them in its commit's round trip, see
docs/performance.rst), in alternating blocks: with the chain, as the adapter
runs, and without it (the finish batch without the link's INSERT and
DELETE, the poll without the check, as before step 0009).  Both are
statements in batches that were sent anyway, so the difference is server
work, no round trip.  It prints each side's median time per commit and
its polls over the blocks, their ratio, the same for the server's CPU
time (its processes' in /proc: on a machine shared with others, CPU
time moves less than the clock), and how many snapshots were found torn
and begun again, and writes them to
``benchmarks/results/chain_cost.json`` (``--json``).
"""
import statistics
import sys
import time

from harness import SRC
from harness.backends import database_for
from harness.backends import fresh_relstorage
from harness.cli import Parser
from harness.environment import environment, finish
from harness.procs import server_cpu_seconds
from harness.report import heading, render, show, write_results

sys.path.insert(0, str(SRC))

MODES = ('hp', 'hf')


def sides(adapter):
    """``{side: switch}``: each switch makes the adapter run that side."""
    from relstorage.adapters.mysql.chain import LINK
    from relstorage.adapters.poll import NO_CHANGES
    from relstorage.adapters.poll import POLL
    txncontrol, poller = adapter.txncontrol, adapter.poller
    head = list(txncontrol._head)
    table = ('current_object' if adapter.options.keep_history
             else 'object_state')
    at = head.index(LINK[0])
    assert head[at:at + len(LINK)] == LINK
    count = []

    def seq(value=None):
        with adapter.connmanager.write_session('the commit count') as cur:
            if value is not None:
                cur.execute('UPDATE commit_row SET commit_seq = %s', (value,))
            cur.execute('SELECT commit_seq FROM commit_row')
            return cur.fetchone()[0]

    def chain():
        txncontrol._head = list(head)
        txncontrol._finish = {}
        for name in ('POLL', '_params'):
            poller.__dict__.pop(name, None)
        if count:
            # The commits without links are not counted either: the chain
            # goes on from its last link.
            seq(count.pop())

    def no_chain():
        if not count:       # (not again in a row)
            count.append(seq())
        # The tid's SET stays (the statements after it read it).
        txncontrol._head = head[:at] + [
            'SET @relstorage_tid = (SELECT tid FROM commit_row '
            'WHERE id = 0)'] + head[at + len(LINK):]
        txncontrol._finish = {}
        poller.POLL = POLL.format(table=table)
        poller._params = lambda after: (
            NO_CHANGES if after is None else after,)

    return {'chain': chain, 'no chain': no_chain}


def blocks(db, commits, rounds, polls=1):
    """Per side, the seconds per commit and its polls of each block, and
    the server's CPU seconds per commit and its polls."""
    import transaction
    from persistent.mapping import PersistentMapping

    tm, other_tm = (transaction.TransactionManager(),
                    transaction.TransactionManager())
    conn, other = db.open(tm), db.open(other_tm)
    conn.root()['target'] = target = PersistentMapping(n=0)
    tm.commit()
    switches = sides(db.storage._adapter)
    found = {side: [] for side in switches}
    cpu = {side: [] for side in switches}
    try:
        for index in range(rounds):
            # Each round in both orders in turn (what the server does in
            # the background drifts).
            order = list(switches) if index % 2 == 0 else list(switches)[
                ::-1]
            for side in order:
                switches[side]()
                started, server = time.perf_counter(), server_cpu_seconds()
                for count in range(commits):
                    target['n'] = count
                    tm.commit()
                    # Polls: the first sees the commit, the others none.
                    for _ in range(polls):
                        other_tm.begin()
                    assert other.root()['target']['n'] == count
                found[side].append((time.perf_counter() - started) / commits)
                cpu[side].append((server_cpu_seconds() - server) / commits)
    finally:
        switches['chain']()
        conn.close()
        other.close()
    return found, cpu


def main(argv=None):
    parser = Parser(__doc__.splitlines()[0])
    parser.choice('modes', MODES)
    parser.add_argument('--commits', type=int, default=500,
                        help='commits per block (default 500)')
    parser.add_argument('--rounds', type=int, default=10,
                        help='blocks per side (default 10)')
    parser.add_argument('--polls', type=int, default=1,
                        help='polls after each commit (default 1)')
    parser.servers(sqlite_synchronous=False)
    parser.results('chain_cost.json', keep_data=False)
    args = parser.parse(argv)
    env = environment({})

    import ZODB
    import ZODB.config

    rows, results = [], {}
    for mode in args.modes:
        database = database_for('mysql', args)
        store = fresh_relstorage(database, 'ours', mode, 'chain_cost')
        try:
            storage = ZODB.config.storageFromString(store.zconfig)
            db = ZODB.DB(storage)
            try:
                found, cpu = blocks(db, args.commits, args.rounds,
                                    args.polls)
                torn = storage._adapter.connmanager.torn_snapshots
            finally:
                db.close()
        finally:
            store.close()
        with_, without = (statistics.median(found[side])
                          for side in ('chain', 'no chain'))
        cpu_with, cpu_without = (statistics.median(cpu[side])
                                 for side in ('chain', 'no chain'))
        results[mode] = {'chain': found['chain'],
                         'no_chain': found['no chain'],
                         'median_chain': with_,
                         'median_no_chain': without,
                         'server_cpu_chain': cpu['chain'],
                         'server_cpu_no_chain': cpu['no chain'],
                         'median_server_cpu_chain': cpu_with,
                         'median_server_cpu_no_chain': cpu_without,
                         'torn_snapshots': torn}
        rows.append((mode, f'{with_ * 1e3:.3f} ms',
                     f'{without * 1e3:.3f} ms', f'{with_ / without:.3f}',
                     f'{cpu_with * 1e3:.3f} ms', f'{cpu_without * 1e3:.3f} ms',
                     f'{cpu_with / cpu_without:.3f}', torn))
    lines = heading(finish(env)) + [
        f'One object changed per commit, then {args.polls} poll(s) on '
        f'another connection; '
        f'{args.rounds} blocks of {args.commits} per side, alternating; '
        f'medians of the blocks.', ''] + render(
        ('mode', 'chain', 'no chain', 'ratio', 'server CPU, chain',
         'no chain', 'ratio', 'torn'), rows,
        right_from=1)
    show(lines)
    write_results(args.json, {
        'environment': env,
        'settings': {'commits': args.commits, 'rounds': args.rounds,
                     'polls': args.polls,
                     'modes': list(args.modes)},
        'results': results, 'report': '\n'.join(lines)})
    return 0


if __name__ == '__main__':
    sys.exit(main())
