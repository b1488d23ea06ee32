"""Our relstorage on PostgreSQL with and without ``transaction-pooler``,
side by side in one run, and that mode through PgBouncer.

    .venv/bin/python benchmarks/pooler.py [--modes hp,hf] [--objects N]
        [--pool-size 8] [--quick] [--round-trips | --rtt MS]

Three sides of ours, each on fresh databases, take turns through every
phase of run.py (writes, small commits, conflicts, reads, prefetch,
single and random loads, several processes, requests):

- ``default``: the storage as it runs without the option (server-side
  prepared statements, the session's staging table, the pack's advisory
  lock, a snapshot begun by each commit for the next transaction);
- ``pooler``: ``transaction-pooler true``, connected to the server
  directly: what the mode itself costs;
- ``pgbouncer``: the same through a private PgBouncer
  (harness/pgbouncer.py: Debian's program, ``pool_mode = transaction``,
  ``--pool-size`` server sessions; the machine needs ``pgbouncer``).

It prints each figure per side and how many times faster the mode is than
the default (> 1.0: faster), and writes them to
``benchmarks/results/pooler.json``.  With ``--round-trips`` (or ``--rtt``)
the connections reach the server through a relay (PgBouncer's too: the
bouncer connects to the relay), and a second table shows the round trips
per operation of each side.  The pack is measured by pack.py (its
``--transaction-pooler``), RelStorage 4.3 by run.py.
"""
import subprocess
import sys

from harness import backends, environment, roundtrips
from harness.backends import MODES
from harness.cli import Parser
from harness.pgbouncer import Bouncer, Missing, program
from harness.report import heading, log, render, show, write_results
from harness.sides import prepare
from run import WORKLOAD, Contender, measure
from run_report import METRICS, UNITS, fmt, label_of, ratio

#: The sides, in the order of the tables.
SIDES = ('default', 'pooler', 'pgbouncer')


def parse_args(argv):
    parser = Parser(__doc__.splitlines()[0])
    parser.choice('modes', MODES, help='comma-separated: hp '
                  '(history-preserving), hf (history-free)')
    parser.quick()
    parser.scaled('--objects', 20000, 2000, help='objects written and read')
    parser.scaled('--repeat', 3, 1, help='write runs and read processes '
                  'per side (default 3, 1 with --quick)')
    parser.scaled('--extra-repeat', 2, 1, help='prefetch and single-load '
                  'processes per side')
    parser.add_argument('--hot-repeat', type=int, default=3)
    parser.scaled('--latency-commits', 300, 50)
    parser.scaled('--threads', 4, 2, help='threads in the conflict phase')
    parser.scaled('--conflict-commits', 50, 10)
    parser.scaled('--mixed-requests', 500, 100)
    parser.add_argument('--mixed-reads', type=int, default=5)
    parser.add_argument('--mixed-writes', type=int, default=1)
    parser.add_argument('--processes', type=int, default=4)
    parser.add_argument('--mp-objects', type=int)
    parser.add_argument('--pool-size', type=int, default=8,
                        help="PgBouncer's default_pool_size (default 8)")
    parser.servers(sqlite_synchronous=False)
    parser.round_trips()
    parser.results('pooler.json', 'pooler-quick.json')
    args = parser.parse(argv)
    if args.mp_objects is None:
        args.mp_objects = args.objects
    return args


def bouncer_version():
    done = subprocess.run([program(), '--version'], capture_output=True,
                          text=True, timeout=60)
    return (done.stdout or done.stderr).strip().splitlines()[0]


def sides_for(database, bouncer, mode, relay_control):
    """The three Contenders on ``database`` (routed through the relay when
    counting), the last through ``bouncer``."""
    routes = {'default': database, 'pooler': database.pooled(),
              'pgbouncer': database.through(bouncer.port).pooled()}
    return [Contender(
        'ours', 'postgresql',
        lambda key=key: backends.fresh_relstorage(routes[key], 'ours', mode,
                                                  key),
        relay_control=relay_control, key=key, label=key)
        for key in SIDES]


def table(args, cell):
    rows = []
    for key, label, kind in METRICS:
        values = [cell[side].get('metrics', {}).get(key) for side in SIDES]
        if values[0] is None:
            continue
        row = [label_of(label, args), UNITS[kind], fmt(values[0], kind)]
        for value in values[1:]:
            found = ratio(value, values[0], kind)
            row += [fmt(value, kind),
                    '-' if found is None else f'{found:.2f}']
        rows.append(row)
    return render(('phase', 'unit', 'default', 'pooler', 'vs default',
                   'pgbouncer', 'vs default'), rows)


def trips_table(cell):
    """Round trips per operation of each side: every phase and unit the
    workloads counted, in the order the default side's figures list
    them."""
    figures = [cell[side].get('round_trips') or {} for side in SIDES]
    rows = []
    for phase, units in figures[0].items():
        for unit in units:
            rows.append([phase, unit] + [roundtrips.fmt(
                found.get(phase, {}).get(unit)) for found in figures])
    return render(('phase', 'per', *SIDES), rows)


def main(argv=None):
    args = parse_args(argv)
    args.skipped = []
    try:
        version = bouncer_version()
    except (TypeError, OSError) as e:
        raise SystemExit(f'pgbouncer is needed (apt-get install pgbouncer):'
                         f' {e}')
    probes = prepare(('ours',), WORKLOAD, log)
    direct = backends.database_for('postgresql', args)
    env = environment.environment(
        {'postgresql': direct.server_version()}, probes, pgbouncer=version,
        pool_size=args.pool_size)
    results = {}
    with roundtrips.Relays(args.rtt) as relays:
        database = relays.route('postgresql', direct)
        target = (('127.0.0.1', database.client_port)
                  if database.client_port else database.server())
        try:
            bouncer = Bouncer(target, 'transaction', args.pool_size)
        except Missing as e:
            raise SystemExit(str(e))
        try:
            for mode in args.modes:
                where = f'PostgreSQL {MODES[mode][0]}'
                results[mode] = measure(
                    sides_for(database, bouncer, mode,
                              relays.control('postgresql')), where, args)
        finally:
            bouncer.close()
            if not args.keep_data:
                backends.remove_data()
    lines = heading(environment.finish(env))
    for mode, cell in results.items():
        title = (f'PostgreSQL, {MODES[mode][0]}, {args.objects:,} objects:'
                 ' transaction-pooler against the default')
        lines += [title, '-' * len(title), ''] + table(args, cell) + ['']
        if relays.active:
            lines += ['Round trips per operation:', ''] + trips_table(
                cell) + ['']
        for side in SIDES:
            for phase, error in cell[side]['errors'].items():
                lines.append(f'FAILED: {side} {phase}: {error}')
    show(lines)
    write_results(args.json, {
        'environment': env, 'results': results,
        'summary': {mode: {side: cell[side].get('metrics') for side in SIDES}
                    for mode, cell in results.items()},
        'round_trips': ({mode: {side: cell[side].get('round_trips')
                                for side in SIDES}
                         for mode, cell in results.items()}
                        if relays.active else None)})
    failed = any(cell[side]['errors'] for cell in results.values()
                 for side in SIDES)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
