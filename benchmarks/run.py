"""Benchmark our relstorage against RelStorage 4.3, FileStorage and ZEO, in
one run.

    python benchmarks/run.py [--backends sqlite,postgresql,mysql]
                             [--modes hp,hf] [--objects N] [--processes P]
                             [--quick]

Run it with the project's interpreter (``.venv/bin/python``): that is our
side, and FileStorage's and ZEO's.  The reference side, RelStorage 4.3,
runs in ``benchmarks/.venv-reference``, which this script builds from PyPI
on first use (and rebuilds when it is not what requirements-reference.txt
asks for); on MariaDB it runs with the run-time patch of mariadb_patch.py,
which the report announces.  Every measurement is a subprocess running
``workload.py`` (or ``floor.py`` for the bare driver) with a ZConfig
string, so the same code drives every implementation.  See README.rst for
what each phase does.

With ``--round-trips`` or ``--rtt MS`` every side's connections to
PostgreSQL and MariaDB go through a relay process (one per server, for
the whole run; harness/roundtrips.py), each workload process records the
round trips of its phases, and the report adds a table of round trips per
operation; SQLite, FileStorage and ZEO are skipped then.

This file is the phases and their figures; the sides, databases,
processes, options, environment and results document are the harness's
(``harness/``), the tables and targets run_report.py's.
"""
import os
import sys
import tempfile
from pathlib import Path

import run_report
from harness import DATA, backends, environment, figures, roundtrips
from harness.backends import BACKENDS, MODES, TITLES
from harness.cli import Parser
from harness.procs import WorkloadFailed, run_all
from harness.report import log, reference_patch, write_results
from harness.sides import IMPLS, LABELS, Side, Turns, prepare
from harness.venvs import clean_env

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / 'workload.py'
FLOOR = HERE / 'floor.py'
OTHERS = run_report.OTHERS


class Contender(Side):
    """A side of run.py: its workload.py, how to get a fresh storage, and
    whether several processes can share one of its storages.  ``key``
    names its figures in a cell of results (default: its implementation;
    pooler.py compares two configurations of ours)."""

    def __init__(self, impl, backend, fresh, processes=True,
                 relay_control=None, key=None, label=None):
        super().__init__(impl, backend, WORKLOAD, label=label)
        self.fresh = fresh
        self.processes = processes
        self.relay_control = relay_control
        self.key = key or impl


def run_workers(side, commands, timeout=1800):
    """One worker process per command (its words and arguments) started
    at once; their JSON results (see procs.run_all)."""
    return run_all([side.start(*words) for words in commands], timeout)


def several_processes(side, zconfig, args):
    """``args.processes`` workers on one storage, each on its own objects;
    returns the aggregate of each phase (objects over the span from the
    first worker's start to the last one's end)."""
    n = args.processes
    side.run('mp-setup', '--zconfig', zconfig, '--processes', n)
    per_worker = max(1, args.mp_objects // n)
    with tempfile.TemporaryDirectory(prefix='bench-mp-') as tmp:
        barrier = Path(tmp, 'barrier')
        barrier.mkdir()
        results = run_workers(side, [
            ('mp-worker', '--zconfig', zconfig, '--objects', per_worker,
             '--processes', n, '--index', index, '--barrier', barrier)
            for index in range(n)])
    phases = {}
    for key in results[0]['phases']:
        parts = [r['phases'][key] for r in results]
        span = max(p['end'] for p in parts) - min(p['start'] for p in parts)
        objects = sum(p['objects'] for p in parts)
        phases[key] = {'seconds': span, 'objects': objects,
                       'processes': n, 'rate': objects / span,
                       'per_process_seconds': [p['end'] - p['start']
                                               for p in parts]}
        relay = roundtrips.across_processes(parts)
        if relay:
            phases[key]['relay'] = relay
    return {'phases': phases}


def mixed_processes(side, zconfig, args):
    """``args.processes`` workers of the request-like workload on one
    storage (transactions of five random lookups and a small write),
    checked afterwards; the aggregate rate of requests over the span."""
    n = args.processes
    with tempfile.TemporaryDirectory(prefix='bench-mixed-') as tmp:
        barrier = Path(tmp, 'barrier')
        barrier.mkdir()
        bumps = [Path(tmp, f'bumps-{index}.json') for index in range(n)]
        results = run_workers(side, [
            ('mixed-worker', '--zconfig', zconfig, '--objects', args.objects,
             '--processes', n, '--index', index, '--seed', 7000 + index,
             '--requests', args.mixed_requests, '--reads', args.mixed_reads,
             '--writes', args.mixed_writes, '--barrier', barrier,
             '--bumps', bumps[index])
            for index in range(n)])
        check = side.run('mixed-check', '--zconfig', zconfig,
                         '--objects', args.objects, '--bumps', *bumps)
    parts = [r['phases']['mixed'] for r in results]
    span = max(p['end'] for p in parts) - min(p['start'] for p in parts)
    requests = sum(p['objects'] for p in parts)
    out = {'seconds': span, 'requests': requests, 'processes': n,
           'rate': requests / span,
           'conflicts': sum(p['conflicts'] for p in parts),
           'checked': check['checked'], 'bumped': check['bumped'],
           'read_ahead': [p['read_ahead'] for p in parts]}
    relay = roundtrips.across_processes(parts)
    if relay:
        out['relay'] = relay
    return out


# -- one backend and mode ----------------------------------------------------

class Measurement:
    """Every phase for each side of one comparison, on fresh storages."""

    def __init__(self, sides, where, args):
        self.sides, self.where, self.args = sides, where, args
        self.cell = {'load_average': [os.getloadavg()[0]]}
        for side in sides:
            self.cell[side.key] = {'writes': [], 'reads': [],
                                    'prefetch': [], 'single': [],
                                    'random': [], 'random_prefetch': [],
                                    'errors': {}}
        self.stores = {}
        self.oids = {side.key: DATA / f'oids-{side.key}.json'
                     for side in sides}

    def attempt(self, side, phase, what, function):
        """Run one phase of one side unless that side failed its writes
        or an earlier run of this phase; record a failure."""
        entry = self.cell[side.key]
        if 'write' in entry['errors'] or phase in entry['errors']:
            return
        log(f'{self.where}: {side.label}: {what}')
        try:
            function(side, entry)
        except (WorkloadFailed, RuntimeError) as e:
            entry['errors'][phase] = str(e)
            log(f'  FAILED: {side.label} {phase} on {self.where}:\n{e}')

    def rounds(self, phase, what, repeats, function):
        """``repeats`` rounds of one phase, the sides alternating."""
        for round_, side in Turns().rounds(self.sides, repeats):
            self.attempt(side, phase, f'{what} {round_ + 1}/{repeats}',
                         function)

    def write(self, side, entry):
        """A write run on a fresh storage; the later phases read the
        storage of the last one."""
        args = self.args
        if side.key in self.stores:
            self.stores.pop(side.key).close()
        self.stores[side.key] = store = side.fresh()
        entry['writes'].append(side.run(
            'write', '--zconfig', store.zconfig, '--objects', args.objects,
            '--latency-commits', args.latency_commits,
            '--threads', args.threads,
            '--conflict-commits', args.conflict_commits,
            '--oids', self.oids[side.key]))
        entry['info'] = entry['writes'][-1]['info']
        failed = entry['writes'][-1]['phases'].get('conflicts', {}).get(
            'error')
        if failed:
            log(f'  conflict phase FAILED: {failed}')

    def read(self, side, entry):
        entry['reads'].append(side.run(
            'read', '--zconfig', self.stores[side.key].zconfig,
            '--objects', self.args.objects,
            '--hot-repeat', self.args.hot_repeat))

    def by_oid(self, command, key):
        def run(side, entry):
            entry[key].append(side.run(
                command, '--zconfig', self.stores[side.key].zconfig,
                '--oids', self.oids[side.key]))
        return run

    def concurrent(self, side, entry):
        entry['mp'] = several_processes(
            side, self.stores[side.key].zconfig, self.args)

    def random_read(self, prefetch):
        """A fresh process reading a random 5 % by key; the seed is the
        round's, the same for both sides of a round."""
        key = 'random_prefetch' if prefetch else 'random'

        def run(side, entry):
            extra = ('--prefetch', '--oids', self.oids[side.key]) if (
                prefetch) else ()
            entry[key].append(side.run(
                'random-read', '--zconfig', self.stores[side.key].zconfig,
                '--objects', self.args.objects,
                '--seed', 1000 + len(entry[key]), *extra))
        return run

    def mixed(self, side, entry):
        entry['mixed'] = mixed_processes(
            side, self.stores[side.key].zconfig, self.args)

    def run(self):
        args = self.args
        DATA.mkdir(parents=True, exist_ok=True)
        try:
            self.rounds('write', 'write phases', args.repeat, self.write)
            self.rounds('read', 'cold, warm and hot read', args.repeat,
                        self.read)
            self.rounds('prefetch', 'prefetch', args.extra_repeat,
                        self.by_oid('prefetch', 'prefetch'))
            self.rounds('load-single', 'cold single loads',
                        args.extra_repeat,
                        self.by_oid('load-single', 'single'))
            self.rounds('random-read', 'cold random read', args.repeat,
                        self.random_read(False))
            self.rounds('random-prefetch', 'cold random read, prefetched',
                        args.extra_repeat, self.random_read(True))
            if args.processes > 1:
                for side in self.sides:
                    if side.processes:
                        self.attempt(side, 'mp',
                                     f'{args.processes} processes',
                                     self.concurrent)
                # Last: its writes change the objects the reads check.
                for side in self.sides:
                    if side.processes:
                        self.attempt(side, 'mixed',
                                     f'requests, {args.processes} processes',
                                     self.mixed)
        finally:
            for store in self.stores.values():
                store.close(keep=args.keep_data)
        self.cell['load_average'].append(os.getloadavg()[0])
        for side in self.sides:
            entry = self.cell[side.key]
            if entry['writes']:
                entry['metrics'] = summarize(entry)
            if side.relay_control:
                entry['round_trips'] = round_trip_figures(entry)
        return self.cell


def measure(sides, where, args):
    """Every phase for each side; returns the cell of results: per
    implementation the raw runs, errors and metrics."""
    return Measurement(sides, where, args).run()


def write_metrics(write):
    phases = write['phases']
    out = {key: phases[key]['rate']
           for key in ('add_100', 'add_1000', 'update_1000')}
    for p in ('p50', 'p90', 'p99'):
        out[f'commit_{p}'] = phases['commit_latency'][p] * 1000
    if 'rate' in phases.get('conflicts', {}):
        out['conflicts'] = phases['conflicts']['rate']
    return out


def best_of(runs, phase, field='rate', scale=1, lowest=False):
    """The best figure of one phase over fresh processes: the highest rate,
    or with ``lowest`` the lowest time.  The read figures of one
    implementation fall into two groups a factor of up to 1.8 apart from
    one process to the next, both sides alike (the machine's, not the
    code's: see docs/performance.rst); a median of two or three then says
    which group most processes fell into, the best says what the code
    costs."""
    return figures.best([r['phases'][phase][field] * scale for r in runs],
                        lowest)


def summarize(entry):
    """The figures of one implementation in one backend and mode: the
    median of each write figure over the write runs, the best cold, warm
    and hot read, prefetch and single load over fresh processes, the
    multi-process aggregates."""
    out = figures.medians([write_metrics(w) for w in entry['writes']])
    reads = entry['reads']
    if reads:
        out['cold_read'] = best_of(reads, 'cold_read')
        out['warm_read'] = best_of(reads, 'warm_read')
        out['hot_read'] = max(r['phases']['hot_read']['rate'] for r in reads)
    if entry['prefetch']:
        out['prefetch'] = best_of(entry['prefetch'], 'prefetch')
    if entry['single']:
        out['load_single'] = best_of(entry['single'], 'load_single')
        out['load_single_p50'] = best_of(entry['single'], 'load_single',
                                         'p50', 1000, lowest=True)
    for key, phase in entry.get('mp', {}).get('phases', {}).items():
        out[key] = phase['rate']
    if entry['random']:
        out['random_read'] = best_of(entry['random'], 'random_read')
        out['random_load'] = best_of(entry['random'], 'random_read',
                                     'per_load', 1000, lowest=True)
        counters = [r['phases']['random_read']['read_ahead']
                    for r in entry['random']]
        counters = [c for c in counters if c]
        if counters:
            rows = sum(c['rows'] for c in counters)
            out['read_ahead_unused_share'] = (
                sum(c['unused'] for c in counters) / rows if rows else 0.0)
            out['read_ahead_rows_per_process'] = rows / len(counters)
    if entry['random_prefetch']:
        out['random_prefetch'] = best_of(entry['random_prefetch'],
                                         'random_prefetch')
    if 'mixed' in entry:
        out['mixed'] = entry['mixed']['rate']
    return out


#: The phases of each list of runs in an implementation's entry.
RUN_PHASES = {
    'writes': ('add_100', 'add_1000', 'update_1000', 'commit_latency',
               'conflicts'),
    'reads': ('cold_read', 'warm_read', 'hot_read'),
    'prefetch': ('prefetch',), 'single': ('load_single',),
    'random': ('random_read',), 'random_prefetch': ('random_prefetch',),
}


def round_trip_figures(entry):
    """``{phase: {unit: round trips per operation}}`` of one implementation
    in one backend and mode: the median over the runs of each phase whose
    runs counted them, and the multi-process phases (their relay records
    span all the processes)."""
    out = {}
    for key, phases in RUN_PHASES.items():
        for phase in phases:
            found = roundtrips.medians(
                r['phases'].get(phase, {}).get('relay')
                for r in entry[key])
            if found:
                out[phase] = found
    shared = dict(entry.get('mp', {}).get('phases', {}))
    if 'mixed' in entry:
        shared['mixed'] = entry['mixed']
    for phase, figures_ in shared.items():
        found = roundtrips.per_operation(figures_.get('relay'))
        if found:
            out[phase] = found
    return out


def floor_round_trips(floor):
    """The floor's ``{phase: {unit: round trips per operation}}``."""
    out = {}
    for phase, record in floor.get('phases', {}).items():
        found = roundtrips.per_operation(record.get('relay'))
        if found:
            out[phase] = found
    return out


def summarize_floor(floor):
    phases = floor['phases']
    out = {key: phases[key]['rate']
           for key in ('add_100', 'add_1000', 'update_1000', 'cold_read')}
    select = phases['cold_read']['select']
    out['load_single'] = 1 / select['mean']
    # A random load is one SELECT by key, as the floor's.
    out['random_load'] = select['mean'] * 1000
    out['load_single_p50'] = select['p50'] * 1000
    for p in ('p50', 'p90', 'p99'):
        out[f'commit_{p}'] = phases['commit_latency'][p] * 1000
    return out


def run_floor(backend, database, args, size, relay_control=None):
    """The floor's figures on ``backend`` (floor.py, the bare driver, on a
    database of its own), for rows of ``size`` bytes."""
    log(f'{TITLES[backend]}: floor (bare driver, no ZODB)')
    database.create('bench_floor')
    side = Side('floor', workload=FLOOR)
    side.relay_control = relay_control
    try:
        return side.run(
            backend, '--objects', args.objects, '--size', size,
            '--repeat', args.repeat,
            '--latency-commits', args.latency_commits,
            *database.floor_args('bench_floor'))
    finally:
        database.drop('bench_floor')


# -- main --------------------------------------------------------------------

def parse_args(argv):
    parser = Parser('Benchmark relstorage against RelStorage 4.3, '
                    'FileStorage and ZEO.')
    parser.choice('backends', BACKENDS, help='comma-separated: sqlite, '
                  'postgresql, mysql (MariaDB)')
    parser.choice('modes', MODES, help='comma-separated: hp '
                  '(history-preserving), hf (history-free)')
    parser.choice('others', OTHERS, what='storage', help='comma-separated: '
                  'filestorage, zeo, or none')
    parser.quick()
    parser.scaled('--objects', 20000, 2000, help='objects written and read '
                  '(default 20000, 2000 with --quick)')
    parser.scaled('--repeat', 3, 1, help='write runs (each on a fresh '
                  'database) and read processes per implementation; writes '
                  'report the median run, reads the best process (default '
                  '3, 1 with --quick)')
    parser.scaled('--extra-repeat', 2, 1, help='prefetch and single-load '
                  'processes per implementation (default 2, 1 with --quick)')
    parser.add_argument('--hot-repeat', type=int, default=3)
    parser.scaled('--latency-commits', 300, 50,
                  help='single small commits timed (default 300)')
    parser.scaled('--threads', 4, 2,
                  help='threads in the conflict phase (default 4)')
    parser.scaled('--conflict-commits', 50, 10, help='commits per thread in '
                  'the conflict phase (default 50)')
    parser.scaled('--mixed-requests', 500, 100, help='requests (each a '
                  'transaction of --mixed-reads lookups and --mixed-writes '
                  'writes) per process of the mixed workload')
    parser.add_argument('--mixed-reads', type=int, default=5,
                        help='random lookups per request (default 5)')
    parser.add_argument('--mixed-writes', type=int, default=1,
                        help='objects written per request (default 1; more '
                        'go to each process\'s own share of the objects)')
    parser.add_argument('--processes', type=int, default=4,
                        help='concurrent processes in the multi-process '
                        'phases (default 4; 1 skips them)')
    parser.add_argument('--mp-objects', type=int,
                        help='objects written and read by all the '
                        'processes together (default: --objects)')
    parser.servers()
    parser.round_trips()
    parser.add_argument('--cache-local-mb', type=float,
                        help='cache-local-mb for both relstorages (default: '
                        'each its own default, 10 MB in both)')
    parser.results('latest.json')
    args = parser.parse(argv)
    if args.mp_objects is None:
        args.mp_objects = args.objects
    roundtrips.networked_only(parser, args)
    if args.round_trips:
        args.skipped += [LABELS[o] for o in args.others]
        args.others = []
    return args


def main(argv=None):
    args = parse_args(argv)
    with roundtrips.Relays(args.rtt) as relays:
        return run(args, relays)


def run(args, relays):
    backends.CACHE_LOCAL_MB = args.cache_local_mb
    probes = prepare(IMPLS, WORKLOAD, log)
    databases = {b: backends.database_for(b, args) for b in args.backends}
    env = environment.environment(
        {b: d.server_version() for b, d in databases.items()}, probes)
    settings = {k: getattr(args, k) for k in (
        'backends', 'modes', 'others', 'objects', 'quick', 'repeat',
        'extra_repeat', 'hot_repeat', 'latency_commits', 'threads',
        'conflict_commits', 'processes', 'mp_objects', 'mixed_requests',
        'mixed_reads', 'mixed_writes',
        'sqlite_synchronous', 'cache_local_mb', 'round_trips', 'rtt',
        'skipped')}
    # Through a relay (--round-trips, --rtt): the storages and the floor
    # connect to it, the databases are still created directly.
    databases = {b: relays.route(b, d) for b, d in databases.items()}
    results, floors = {}, {}
    for backend, database in databases.items():
        for mode in args.modes:
            sides = [Contender(
                impl, backend, lambda impl=impl, mode=mode, database=database:
                backends.fresh_relstorage(database, impl, mode),
                relay_control=relays.control(backend))
                for impl in IMPLS]
            where = f'{TITLES[backend]} {MODES[mode][0]}'
            results.setdefault(backend, {})[mode] = measure(sides, where,
                                                            args)
        size = None
        for cell in results[backend].values():
            for impl in IMPLS:
                for write in cell[impl]['writes']:
                    size = size or write['mean_state_size']
        try:
            floors[backend] = run_floor(backend, database, args, size or 250,
                                        relays.control(backend))
        except WorkloadFailed as e:
            floors[backend] = {'error': str(e)}
            log(f'  FAILED: floor on {backend}:\n{e}')
    others = None
    if args.others:
        makers = {
            'filestorage': lambda: backends.fresh_filestorage(
                'bench-filestorage'),
            'zeo': lambda: backends.fresh_zeo('bench-zeo', clean_env()),
        }
        sides = [Contender(o, None, makers[o], processes=(o == 'zeo'))
                 for o in args.others]
        others = measure(sides, 'FileStorage and ZEO', args)
    if not args.keep_data:
        backends.remove_data()
    relays.stop()

    floor_figures = {b: summarize_floor(f) for b, f in floors.items()
                     if 'phases' in f}
    floor_trips = ({b: floor_round_trips(f) for b, f in floors.items()
                    if 'phases' in f} if relays.active else None)
    text, checks = run_report.make_report(args, env, results, floors,
                                          floor_figures, others, floor_trips)
    print(text)
    patched = [cell['ref']['info'].get('mariadb_patch')
               for cell in results.get('mysql', {}).values()
               if 'info' in cell['ref']]
    write_results(args.json, {
        'environment': env, 'settings': settings,
        'results': results, 'others': others, 'floors': floors,
        'reference_patch': (reference_patch(
            patched=patched[0] if patched else None)
            if 'mysql' in args.backends else None),
        'summary': {b: {m: {impl: results[b][m][impl].get('metrics')
                            for impl in IMPLS}
                        for m in args.modes}
                    for b in args.backends},
        'others_summary': ({o: others[o].get('metrics') for o in args.others}
                           if others else {}),
        'floor_summary': floor_figures,
        'round_trips': ({
            'relay': relays.describe(),
            'summary': {b: {m: {impl: results[b][m][impl].get('round_trips')
                                for impl in IMPLS}
                            for m in args.modes}
                        for b in args.backends},
            'floor': floor_trips} if relays.active else None),
        'checks': checks,
        'report': text})
    # A failed phase of ours (a check that raised) fails the run; targets
    # missed and failures of the other implementations do not.
    failed = any(results[b][m]['ours']['errors'] for b in args.backends
                 for m in args.modes)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
