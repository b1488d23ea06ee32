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
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SRC = REPO / 'src'
WORKLOAD = HERE / 'workload.py'
FLOOR = HERE / 'floor.py'

sys.path.insert(0, str(HERE))
import backends  # noqa: E402
import mariadb_patch  # noqa: E402
import refenv  # noqa: E402
import report  # noqa: E402
from backends import BACKENDS, DATA, MODES, TITLES  # noqa: E402
from report import LABELS  # noqa: E402

IMPLS = ('ours', 'ref')
OTHERS = ('filestorage', 'zeo')

_started = time.monotonic()


def log(message):
    print(f'[{time.monotonic() - _started:6.1f}s] {message}', flush=True)


# -- running the workload ----------------------------------------------------

class WorkloadFailed(Exception):
    pass


def tail(text, lines=15):
    return '\n'.join(text.strip().splitlines()[-lines:])


def subprocess_json(cmd, timeout):
    """Run ``cmd`` with ``--out FILE`` appended; returns the JSON it wrote."""
    fd, out = tempfile.mkstemp(prefix='bench-', suffix='.json')
    os.close(fd)
    try:
        proc = subprocess.run(cmd + ['--out', out], env=refenv.clean_env(),
                              cwd=str(HERE), capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            raise WorkloadFailed(tail(proc.stderr or proc.stdout) or
                                 f'exit status {proc.returncode}')
        with open(out) as f:
            return json.load(f)
    except subprocess.TimeoutExpired:
        raise WorkloadFailed(f'{cmd[3]} ran longer than {timeout}s')
    finally:
        os.remove(out)


class Side:
    """One implementation on one backend: which interpreter runs it, where
    its relstorage must come from, and how to get a fresh storage."""

    def __init__(self, impl, fresh, flags=(), processes=True):
        self.impl = impl
        self.label = LABELS[impl]
        self.python = (str(refenv.python()) if impl == 'ref'
                       else sys.executable)
        self.home = refenv.VENV if impl == 'ref' else SRC
        self.fresh = fresh
        self.flags = list(flags)
        #: Whether several processes can share one of its storages.
        self.processes = processes

    def command(self, command, *args):
        return ([self.python, '-I', str(WORKLOAD), command,
                 '--expect-under', str(self.home)] + self.flags
                + [str(a) for a in args])

    def run(self, command, *args, timeout=1200):
        return subprocess_json(self.command(command, *args), timeout)


def probe(impl):
    cmd = [str(refenv.python()) if impl == 'ref' else sys.executable, '-I',
           str(WORKLOAD), 'probe', '--expect-under',
           str(refenv.VENV if impl == 'ref' else SRC)]
    return subprocess_json(cmd, 300)['info']


def run_workers(side, tmp, commands, timeout=1800):
    """Start one worker process per command (its words and arguments,
    ``--out`` added) at once, wait for all; their JSON results, or
    WorkloadFailed with the stderr of the first that failed (the others
    are killed)."""
    workers = []
    for index, words in enumerate(commands):
        out = Path(tmp, f'out-{index}.json')
        err = open(Path(tmp, f'err-{index}.txt'), 'w')
        cmd = side.command(*words, '--out', out)
        workers.append((subprocess.Popen(
            cmd, env=refenv.clean_env(), cwd=str(HERE),
            stdout=subprocess.DEVNULL, stderr=err), out, err))
    failed = None
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p, _, _ in workers):
        for p, _, err in workers:
            if p.poll() not in (None, 0) and failed is None:
                failed = Path(err.name)
        if failed or time.monotonic() > deadline:
            for p, _, _ in workers:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.05)
    for p, _, err in workers:
        err.close()
        if p.returncode != 0 and failed is None:
            failed = Path(err.name)
    if failed:
        raise WorkloadFailed(tail(failed.read_text()) or
                             'a worker was killed')
    return [json.loads(out.read_text()) for _, out, _ in workers]


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
        results = run_workers(side, tmp, [
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
        results = run_workers(side, tmp, [
            ('mixed-worker', '--zconfig', zconfig, '--objects', args.objects,
             '--processes', n, '--index', index, '--seed', 7000 + index,
             '--requests', args.mixed_requests, '--barrier', barrier,
             '--bumps', bumps[index])
            for index in range(n)])
        check = side.run('mixed-check', '--zconfig', zconfig,
                         '--objects', args.objects, '--bumps', *bumps)
    parts = [r['phases']['mixed'] for r in results]
    span = max(p['end'] for p in parts) - min(p['start'] for p in parts)
    requests = sum(p['objects'] for p in parts)
    return {'seconds': span, 'requests': requests, 'processes': n,
            'rate': requests / span,
            'conflicts': sum(p['conflicts'] for p in parts),
            'checked': check['checked'], 'bumped': check['bumped'],
            'read_ahead': [p['read_ahead'] for p in parts]}


# -- one backend and mode ----------------------------------------------------

def alternate(sides, round_):
    """Who goes first in a round: alternating, so that neither always meets
    the machine in the state the other left it."""
    return sides if round_ % 2 == 0 else sides[::-1]


class Measurement:
    """Every phase for each side of one comparison, on fresh storages."""

    def __init__(self, sides, where, args):
        self.sides, self.where, self.args = sides, where, args
        self.cell = {'load_average': [os.getloadavg()[0]]}
        for side in sides:
            self.cell[side.impl] = {'writes': [], 'reads': [],
                                    'prefetch': [], 'single': [],
                                    'random': [], 'random_prefetch': [],
                                    'errors': {}}
        self.stores = {}
        self.oids = {side.impl: DATA / f'oids-{side.impl}.json'
                     for side in sides}

    def attempt(self, side, phase, what, function):
        """Run one phase of one side unless that side failed its writes
        or an earlier run of this phase; record a failure."""
        entry = self.cell[side.impl]
        if 'write' in entry['errors'] or phase in entry['errors']:
            return
        log(f'{self.where}: {side.label}: {what}')
        try:
            function(side, entry)
        except (WorkloadFailed, RuntimeError) as e:
            entry['errors'][phase] = str(e)
            log(f'  FAILED: {side.label} {phase} on {self.where}:\n{e}')

    def rounds(self, phase, what, repeats, function):
        for round_ in range(repeats):
            for side in alternate(self.sides, round_):
                self.attempt(side, phase, f'{what} {round_ + 1}/{repeats}',
                             function)

    def write(self, side, entry):
        """A write run on a fresh storage; the later phases read the
        storage of the last one."""
        args = self.args
        if side.impl in self.stores:
            self.stores.pop(side.impl).close()
        self.stores[side.impl] = store = side.fresh()
        entry['writes'].append(side.run(
            'write', '--zconfig', store.zconfig, '--objects', args.objects,
            '--latency-commits', args.latency_commits,
            '--threads', args.threads,
            '--conflict-commits', args.conflict_commits,
            '--oids', self.oids[side.impl]))
        entry['info'] = entry['writes'][-1]['info']
        failed = entry['writes'][-1]['phases'].get('conflicts', {}).get(
            'error')
        if failed:
            log(f'  conflict phase FAILED: {failed}')

    def read(self, side, entry):
        entry['reads'].append(side.run(
            'read', '--zconfig', self.stores[side.impl].zconfig,
            '--objects', self.args.objects,
            '--hot-repeat', self.args.hot_repeat))

    def by_oid(self, command, key):
        def run(side, entry):
            entry[key].append(side.run(
                command, '--zconfig', self.stores[side.impl].zconfig,
                '--oids', self.oids[side.impl]))
        return run

    def concurrent(self, side, entry):
        entry['mp'] = several_processes(
            side, self.stores[side.impl].zconfig, self.args)

    def random_read(self, prefetch):
        """A fresh process reading a random 5 % by key; the seed is the
        round's, the same for both sides of a round."""
        key = 'random_prefetch' if prefetch else 'random'

        def run(side, entry):
            extra = ('--prefetch', '--oids', self.oids[side.impl]) if (
                prefetch) else ()
            entry[key].append(side.run(
                'random-read', '--zconfig', self.stores[side.impl].zconfig,
                '--objects', self.args.objects,
                '--seed', 1000 + len(entry[key]), *extra))
        return run

    def mixed(self, side, entry):
        entry['mixed'] = mixed_processes(
            side, self.stores[side.impl].zconfig, self.args)

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
            entry = self.cell[side.impl]
            if entry['writes']:
                entry['metrics'] = summarize(entry)
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
    values = [r['phases'][phase][field] * scale for r in runs]
    if not values:
        return None
    return min(values) if lowest else max(values)


def summarize(entry):
    """The figures of one implementation in one backend and mode: the
    median of each write figure over the write runs, the best cold, warm
    and hot read, prefetch and single load over fresh processes, the
    multi-process aggregates."""
    out = {}
    per_run = [write_metrics(w) for w in entry['writes']]
    for key in dict.fromkeys(k for m in per_run for k in m):
        values = [m[key] for m in per_run if key in m]
        if values:
            out[key] = statistics.median(values)
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


def run_floor(backend, database, args, size):
    log(f'{TITLES[backend]}: floor (bare driver, no ZODB)')
    database.create('bench_floor')
    try:
        cmd = [sys.executable, '-I', str(FLOOR), backend,
               '--objects', str(args.objects), '--size', str(size),
               '--repeat', str(args.repeat),
               '--latency-commits', str(args.latency_commits)]
        cmd += [str(a) for a in database.floor_args('bench_floor')]
        return subprocess_json(cmd, 1200)
    finally:
        database.drop('bench_floor')


# -- reporting ---------------------------------------------------------------

def cpu_model():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_revision():
    try:
        rev = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                             cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(['git', 'status', '--porcelain', 'src'],
                               cwd=REPO, capture_output=True, text=True,
                               check=True).stdout.strip()
        return rev + (' (src/ modified)' if dirty else '')
    except (OSError, subprocess.CalledProcessError):
        return 'unknown'


def environment(probes, servers):
    env = {
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec='seconds'),
        'cpus': os.cpu_count(),
        'cpu': cpu_model(),
        'platform': platform.platform(),
        'git': git_revision(),
        'load_average': [round(x, 2) for x in os.getloadavg()],
    }
    names = {'postgresql': 'postgresql_server', 'mysql': 'mysql_server',
             'sqlite': 'sqlite_library'}
    for backend, version in servers.items():
        env[names[backend]] = version
    for impl, info in probes.items():
        env[impl] = {k: v for k, v in info.items() if k != 'platform'}
    return env


def conflict_notes(cell):
    """Lines under a table about the conflict phase of each side."""
    out = []
    for impl in IMPLS + OTHERS:
        entry = cell.get(impl)
        if not entry:
            continue
        for phase, error in entry.get('errors', {}).items():
            out.append(f'{LABELS[impl]} FAILED in {phase}: '
                       + error.strip().splitlines()[-1])
        runs = [w['phases']['conflicts'] for w in entry['writes']
                if 'conflicts' in w['phases']]
        broken = [r for r in runs if 'error' in r]
        if broken:
            out.append(f'{LABELS[impl]}: conflicting commits FAILED in '
                       f'{len(broken)} of {len(runs)} runs: '
                       f'{broken[0]["error"]}')
        done = [r for r in runs if 'error' not in r]
        if done:
            retries = {}
            for r in done:
                for kind, n in r['retries'].items():
                    retries[kind] = retries.get(kind, 0) + n
            resolved = sum(r['resolved'] or 0 for r in done)
            shown = ', '.join(f'{k} {v / len(done):.0f}'
                              for k, v in sorted(retries.items()))
            out.append(f'{LABELS[impl]}: conflicting commits, per run: '
                       f'{resolved / len(done):.0f} objects resolved at '
                       f'vote; retries: {shown or "none"}')
    return out


def load_line(cell):
    first, last = cell['load_average']
    return (f'load average (1 min) {first:.2f} before these runs, '
            f'{last:.2f} after')


# -- main --------------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        description='Benchmark relstorage against RelStorage 4.3, '
        'FileStorage and ZEO.')
    parser.add_argument('--backends', default=','.join(BACKENDS),
                        help='comma-separated: sqlite, postgresql, mysql '
                        '(MariaDB)')
    parser.add_argument('--modes', default='hp,hf',
                        help='comma-separated: hp (history-preserving), '
                        'hf (history-free)')
    parser.add_argument('--others', default='filestorage,zeo',
                        help='comma-separated: filestorage, zeo, or none')
    parser.add_argument('--objects', type=int,
                        help='objects written and read (default 20000, '
                        '2000 with --quick)')
    parser.add_argument('--quick', action='store_true',
                        help='a small run: a smoke test, not a measurement')
    parser.add_argument('--repeat', type=int,
                        help='write runs (each on a fresh database) and '
                        'read processes per implementation; writes report '
                        'the median run, reads the best process (default 3, '
                        '1 with --quick)')
    parser.add_argument('--extra-repeat', type=int,
                        help='prefetch and single-load processes per '
                        'implementation (default 2, 1 with --quick)')
    parser.add_argument('--hot-repeat', type=int, default=3)
    parser.add_argument('--latency-commits', type=int,
                        help='single small commits timed (default 300)')
    parser.add_argument('--threads', type=int,
                        help='threads in the conflict phase (default 4)')
    parser.add_argument('--conflict-commits', type=int,
                        help='commits per thread in the conflict phase '
                        '(default 50)')
    parser.add_argument('--mixed-requests', type=int,
                        help='requests (5 lookups and a write) per process '
                        'of the mixed workload')
    parser.add_argument('--processes', type=int, default=4,
                        help='concurrent processes in the multi-process '
                        'phases (default 4; 1 skips them)')
    parser.add_argument('--mp-objects', type=int,
                        help='objects written and read by all the '
                        'processes together (default: --objects)')
    add_server_options(parser)
    parser.add_argument('--sqlite-synchronous', default='default',
                        choices=('default', 'off', 'normal', 'full'),
                        help="SQLite's synchronous pragma for both sides; "
                        'default leaves each its own default')
    parser.add_argument('--cache-local-mb', type=float,
                        help='cache-local-mb for both relstorages (default: '
                        'each its own default, 10 MB in both)')
    parser.add_argument('--json', default=str(HERE / 'results' /
                                              'latest.json'),
                        help='where to write the results')
    parser.add_argument('--keep-data', action='store_true',
                        help='keep the databases and files of the run')
    args = parser.parse_args(argv)
    defaults = {'objects': (20000, 2000), 'repeat': (3, 1),
                'extra_repeat': (2, 1), 'latency_commits': (300, 50),
                'threads': (4, 2), 'conflict_commits': (50, 10),
                'mixed_requests': (500, 100)}
    for name, (full, small) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if args.quick else full)
    if args.mp_objects is None:
        args.mp_objects = args.objects

    args.backends = choose(parser, args.backends, BACKENDS, 'backend')
    args.modes = choose(parser, args.modes, MODES, 'mode')
    args.others = choose(parser, args.others, OTHERS, 'storage')
    return args


def add_server_options(parser):
    """The options that say where the servers are (every benchmark's)."""
    parser.add_argument('--pg-dsn',
                        default='host=127.0.0.1 port=5432 user=root',
                        help='libpq connection string without dbname; the '
                        'user must be allowed to create databases')
    parser.add_argument('--mysql-host', default='127.0.0.1')
    parser.add_argument('--mysql-port', type=int, default=3306)
    parser.add_argument('--mysql-user', default='root',
                        help='must be allowed to create databases')
    parser.add_argument('--mysql-passwd', default='')


def choose(parser, text, allowed, what):
    """The names of the comma-separated ``text`` (``none``: none), each
    one of ``allowed``; else a usage error naming ``what``."""
    chosen = [n.strip() for n in text.split(',') if n.strip()]
    chosen = [n for n in chosen if n != 'none']
    for n in chosen:
        if n not in allowed:
            parser.error(f'unknown {what} {n!r}')
    return chosen


def database_for(backend, args):
    if backend == 'postgresql':
        return backends.PostgreSQL(args.pg_dsn)
    if backend == 'mysql':
        return backends.MariaDB(args.mysql_host, args.mysql_port,
                                args.mysql_user, args.mysql_passwd)
    return backends.SQLite(args.sqlite_synchronous)


def main(argv=None):
    args = parse_args(argv)
    backends.CACHE_LOCAL_MB = args.cache_local_mb
    probes = {}
    for impl in IMPLS:
        if impl == 'ref':
            # After our side is known good: the reference environment is
            # pinned to our side's ZODB stack.
            refenv.ensure(log)
        try:
            probes[impl] = probe(impl)
        except WorkloadFailed as e:
            hint = ('run this script with the project\'s venv '
                    '(.venv/bin/python benchmarks/run.py, after pip '
                    "install -e '.[test,bench]')" if impl == 'ours' else
                    f'delete {refenv.VENV} and run again')
            raise SystemExit(f'{LABELS[impl]}: cannot import the expected '
                             f'relstorage: {hint}\n{e}')
        log(f'{LABELS[impl]}: relstorage {probes[impl]["relstorage"]} from '
            f'{probes[impl]["relstorage_file"]} '
            f'({probes[impl]["executable"]})')
    databases = {b: database_for(b, args) for b in args.backends}
    servers = {b: d.server_version() for b, d in databases.items()}
    env = environment(probes, servers)
    settings = {k: getattr(args, k) for k in (
        'backends', 'modes', 'others', 'objects', 'quick', 'repeat',
        'extra_repeat', 'hot_repeat', 'latency_commits', 'threads',
        'conflict_commits', 'processes', 'mp_objects', 'mixed_requests',
        'sqlite_synchronous', 'cache_local_mb')}
    results, floors = {}, {}
    for backend, database in databases.items():
        for mode in args.modes:
            sides = []
            for impl in IMPLS:
                flags = (['--patch-mariadb']
                         if backend == 'mysql' and impl == 'ref' else [])
                sides.append(Side(
                    impl, lambda impl=impl, mode=mode, database=database:
                    backends.fresh_relstorage(database, impl, mode), flags))
            where = f'{TITLES[backend]} {MODES[mode][0]}'
            results.setdefault(backend, {})[mode] = measure(sides, where,
                                                            args)
        size = None
        for cell in results[backend].values():
            for impl in IMPLS:
                for write in cell[impl]['writes']:
                    size = size or write['mean_state_size']
        try:
            floors[backend] = run_floor(backend, database, args, size or 250)
        except WorkloadFailed as e:
            floors[backend] = {'error': str(e)}
            log(f'  FAILED: floor on {backend}:\n{e}')
    others = None
    if args.others:
        env_ = refenv.clean_env()
        makers = {
            'filestorage': lambda: backends.fresh_filestorage(
                'bench-filestorage'),
            'zeo': lambda: backends.fresh_zeo('bench-zeo', env_),
        }
        sides = [Side(o, makers[o], processes=(o == 'zeo'))
                 for o in args.others]
        others = measure(sides, 'FileStorage and ZEO', args)
    if not args.keep_data:
        backends.remove_data()

    text, checks = make_report(args, env, results, floors, others)
    print(text)
    patched = [cell['ref']['info'].get('mariadb_patch')
               for cell in results.get('mysql', {}).values()
               if 'info' in cell['ref']]
    document = {
        'environment': env, 'settings': settings,
        'results': results, 'others': others, 'floors': floors,
        'reference_patch': ({'backend': 'mysql',
                             'description': mariadb_patch.DESCRIPTION,
                             'patched': patched[0] if patched else None}
                            if 'mysql' in args.backends else None),
        'summary': {b: {m: {impl: results[b][m][impl].get('metrics')
                            for impl in IMPLS}
                        for m in args.modes}
                    for b in args.backends},
        'others_summary': ({o: others[o].get('metrics') for o in args.others}
                           if others else {}),
        'floor_summary': {b: summarize_floor(f) for b, f in floors.items()
                          if 'phases' in f},
        'checks': checks,
        'report': text}
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + '\n')
    log(f'results written to {path}')
    # A failed phase of ours (a check that raised) fails the run; targets
    # missed and failures of the other implementations do not.
    failed = any(results[b][m]['ours']['errors'] for b in args.backends
                 for m in args.modes)
    return 1 if failed else 0


def make_report(args, env, results, floors, others):
    env['load_average_end'] = [round(x, 2) for x in os.getloadavg()]
    lines = ['', 'Environment', '===========', '',
             report.describe_environment(env),
             f"load average    {env['load_average_end']} at the end", '']
    loads = [env['load_average'][0], env['load_average_end'][0]] + [
        value for b in results.values() for cell in b.values()
        for value in cell['load_average']]
    # The run keeps about two processes busy (a workload and a database
    # server); more than that means other work shared the machine.
    if max(loads) > (os.cpu_count() or 1) + 1:
        lines += [f'WARNING: the load average reached {max(loads):.2f} on '
                  f'{os.cpu_count()} CPUs: other work shared the machine, '
                  f'and the figures are less reliable.', '']
    if 'mysql' in args.backends:
        lines += [f'NOTE: {mariadb_patch.DESCRIPTION}', '']
    lines += [
        f'{args.objects} objects; write figures: median of {args.repeat} '
        f'runs on fresh databases; cold and warm read: best of '
        f'{args.repeat} fresh processes; hot read: best of '
        f'{args.repeat * args.hot_repeat}; prefetch and single loads: '
        f'best of {args.extra_repeat} fresh processes; '
        f'{args.latency_commits} small commits; {args.processes} processes '
        f'x {args.mp_objects // max(args.processes, 1)} objects; SQLite '
        f'synchronous: {args.sqlite_synchronous}; cache-local-mb: '
        + ('each side\'s default' if args.cache_local_mb is None
           else f'{args.cache_local_mb:g} on both sides') + '.',
        'ratio = how many times faster ours is than RS 4.3 (> 1.0: ours is '
        'faster); target = the ratio wanted (and for single loads on the '
        'server databases, at most 1.5 times the floor\'s time); x/floor '
        '= how many times the bare driver\'s time it takes.', '']
    checks = []
    note = {'conflicts': f'{args.threads} threads x {args.conflict_commits}'}
    for backend in args.backends:
        floor = floors.get(backend, {})
        low = summarize_floor(floor) if 'phases' in floor else {}
        for mode in args.modes:
            cell = results[backend][mode]
            label, keep = MODES[mode]
            title = (f'{TITLES[backend]}, {label} (keep-history '
                     f'{"true" if keep else "false"})')
            metrics = {impl: cell[impl].get('metrics', {}) for impl in IMPLS}
            table, found = report.backend_table(
                backend, f'{TITLES[backend]} {mode}', title, metrics, low,
                args.processes, note)
            checks += found
            lines += table + [load_line(cell)] + conflict_notes(cell) + ['']
        if 'phases' in floor:
            extra = ''
            text = floor['phases'].get('select_text')
            if text:
                extra += (f'; SELECT prepared (as plain text: '
                          f'{text["rate"]:,.0f} rows/s)')
            copy = floor['phases'].get('copy_all')
            if copy:
                extra += f'; one COPY of all rows: {copy["rate"]:,.0f} rows/s'
            lines += [f'floor on {TITLES[backend]}: {floor["driver"]}, rows '
                      f'of {floor["row_size"]} bytes{extra}.', '']
        elif floor:
            lines += [f'floor on {TITLES[backend]} FAILED: '
                      f'{floor["error"]}', '']
    if others:
        ours_by_run = {
            f'{b} {m}': results[b][m]['ours'].get('metrics', {})
            for b in args.backends for m in args.modes}
        lines += report.others_table(
            {o: others[o].get('metrics', {}) for o in args.others},
            ours_by_run, args.processes)
        lines += [load_line(others)] + conflict_notes(others)
        for impl in args.others:
            runs = others[impl]['prefetch']
            if runs and not runs[-1]['phases']['prefetch']['storage_prefetch']:
                lines.append(f'{LABELS[impl]} has no storage.prefetch: its '
                             f'prefetch figure is the same reads without it.')
        lines.append('')
    lines += report.summary(checks)
    return '\n'.join(lines), checks


if __name__ == '__main__':
    sys.exit(main())
