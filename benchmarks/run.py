"""Benchmark our relstorage against RelStorage 4.3 from PyPI, in one run.

    python benchmarks/run.py [--backends sqlite,postgresql] [--modes hp,hf]
                             [--objects N] [--quick]

Run it with the project's interpreter (``.venv/bin/python``): that is our
side.  The reference side, RelStorage 4.3, runs in ``benchmarks/
.venv-reference``, which this script builds from PyPI on first use (and
rebuilds when it is not what requirements-reference.txt asks for).  Every
measurement is a subprocess running ``workload.py`` with a ZConfig string,
so the same code drives both.  See README.rst for what each phase does.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
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
DATA = HERE / 'data'

sys.path.insert(0, str(HERE))
import refenv  # noqa: E402

BACKENDS = ('sqlite', 'postgresql')
MODES = {'hp': ('history-preserving', True), 'hf': ('history-free', False)}
IMPLS = ('ours', 'ref')
LABELS = {'ours': 'ours', 'ref': 'RS 4.3', 'floor': 'floor'}

#: (key, label, kind): kind 'rate' is objects per second and 'commits'
#: commits per second (higher is better), 'latency' is milliseconds (lower
#: is better).
METRICS = (
    ('add_100', 'add, 100 new objects/txn', 'rate'),
    ('add_1000', 'add, 1000 new objects/txn', 'rate'),
    ('update_1000', 'update, 1000 objects/txn', 'rate'),
    ('cold_read', 'cold read, new process', 'rate'),
    ('hot_read', 'hot read, ZODB cache', 'rate'),
    ('commit_p50', 'small commit, p50', 'latency'),
    ('commit_p90', 'small commit, p90', 'latency'),
    ('commit_p99', 'small commit, p99', 'latency'),
    ('conflicts', 'conflicting commits', 'commits'),
)
UNITS = {'rate': 'obj/s', 'commits': 'commit/s', 'latency': 'ms'}

_started = time.monotonic()


def log(message):
    print(f'[{time.monotonic() - _started:6.1f}s] {message}', flush=True)


# -- running the workload ----------------------------------------------------

def interpreter(impl):
    return sys.executable if impl == 'ours' else str(refenv.python())


def expected_home(impl):
    return SRC if impl == 'ours' else refenv.VENV


class WorkloadFailed(Exception):
    pass


def workload(python, command, *args, timeout=1200):
    """Run one workload command; returns its JSON result."""
    fd, out = tempfile.mkstemp(prefix='bench-', suffix='.json')
    os.close(fd)
    cmd = [str(python), '-I', str(WORKLOAD), command, '--out', out]
    cmd += [str(a) for a in args]
    try:
        proc = subprocess.run(cmd, env=refenv.clean_env(), cwd=str(HERE),
                              capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            raise WorkloadFailed('\n'.join(lines[-15:]) or
                                 f'exit status {proc.returncode}')
        with open(out) as f:
            return json.load(f)
    except subprocess.TimeoutExpired:
        raise WorkloadFailed(f'{command} ran longer than {timeout}s')
    finally:
        os.remove(out)


def run_impl(impl, command, *args):
    return workload(interpreter(impl), command, *args,
                    '--expect-under', expected_home(impl))


# -- databases ---------------------------------------------------------------

class PostgreSQL:
    """Creates and drops the benchmark's databases with psycopg2 (from the
    project's venv, where the test extra installs it)."""

    def __init__(self, dsn):
        try:
            import psycopg2
        except ImportError:
            raise SystemExit('the postgresql backend needs psycopg2 in this '
                             "interpreter: pip install -e '.[test]'")
        self.psycopg2 = psycopg2
        self.base = dsn

    def dsn(self, dbname):
        return f'{self.base} dbname={dbname}'

    def _admin(self, statement):
        conn = self.psycopg2.connect(self.dsn('postgres'))
        conn.autocommit = True
        try:
            conn.cursor().execute(statement)
        finally:
            conn.close()

    def create(self, name):
        self.drop(name)
        self._admin(f'CREATE DATABASE {name}')

    def drop(self, name):
        self._admin(f'DROP DATABASE IF EXISTS {name} WITH (FORCE)')

    def server_version(self):
        conn = self.psycopg2.connect(self.dsn('postgres'))
        try:
            cur = conn.cursor()
            cur.execute('SHOW server_version')
            return cur.fetchone()[0]
        finally:
            conn.close()


def zconfig(backend, keep_history, location, sqlite_synchronous):
    """The ZConfig text both implementations accept for one storage."""
    if backend == 'sqlite':
        pragmas = ''
        if sqlite_synchronous != 'default':
            pragmas = (f'\n    <pragmas>\n      synchronous '
                       f'{sqlite_synchronous}\n    </pragmas>')
        adapter = (f'  <sqlite3>\n    data-dir {location}{pragmas}\n'
                   f'  </sqlite3>')
    else:
        adapter = (f'  <postgresql>\n    dsn {location}\n'
                   f'    driver psycopg2\n  </postgresql>')
    return (f'%import relstorage\n<relstorage>\n'
            f'  keep-history {"true" if keep_history else "false"}\n'
            f'{adapter}\n</relstorage>\n')


def fresh_storage(backend, impl, mode, pg):
    """An empty database for one implementation; returns its location
    (data-dir or dsn) and a function that removes it."""
    name = f'bench_{impl}_{mode}'
    if backend == 'sqlite':
        path = DATA / f'{impl}-{mode}'
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return str(path), lambda: shutil.rmtree(path, ignore_errors=True)
    pg.create(name)
    return pg.dsn(name), lambda: pg.drop(name)


# -- the run -----------------------------------------------------------------

def write_metrics(write):
    phases = write['phases']
    out = {key: phases[key]['rate']
           for key in ('add_100', 'add_1000', 'update_1000')}
    for p in ('p50', 'p90', 'p99'):
        out[f'commit_{p}'] = phases['commit_latency'][p] * 1000
    if 'rate' in phases.get('conflicts', {}):
        out['conflicts'] = phases['conflicts']['rate']
    return out


def summarize(writes, reads):
    """The figures of one implementation in one backend and mode: the
    median of each write figure over the write runs, the median cold read
    over fresh processes and the best hot read."""
    out = {}
    per_run = [write_metrics(w) for w in writes]
    for key in dict.fromkeys(k for m in per_run for k in m):
        values = [m[key] for m in per_run if key in m]
        if values:
            out[key] = statistics.median(values)
    if reads:
        out['cold_read'] = statistics.median(
            r['phases']['cold_read']['rate'] for r in reads)
        out['hot_read'] = max(r['phases']['hot_read']['rate'] for r in reads)
    return out


def summarize_floor(floor):
    phases = floor['phases']
    out = {key: phases[key]['rate']
           for key in ('add_100', 'add_1000', 'update_1000', 'cold_read')}
    for p in ('p50', 'p90', 'p99'):
        out[f'commit_{p}'] = phases['commit_latency'][p] * 1000
    return out


def alternate(round_):
    """Who goes first in a round: alternating, so that neither always meets
    the machine in the state the other left it."""
    return IMPLS if round_ % 2 == 0 else IMPLS[::-1]


def run_backend(backend, modes, args, pg, results):
    for mode in modes:
        label, keep_history = MODES[mode]
        cell = results.setdefault(backend, {}).setdefault(mode, {})
        cell['load_average'] = [os.getloadavg()[0]]
        for impl in IMPLS:
            cell[impl] = {'writes': [], 'reads': []}
        configs = {}
        cleanups = {}
        # Write runs, each on a fresh database; the reads then use the
        # database of the last one.
        for round_ in range(args.repeat):
            for impl in alternate(round_):
                entry = cell[impl]
                if 'error' in entry:
                    continue
                log(f'{backend} {label}: {LABELS[impl]}: write phases '
                    f'{round_ + 1}/{args.repeat}')
                if impl in cleanups:
                    cleanups.pop(impl)()
                try:
                    location, cleanups[impl] = fresh_storage(
                        backend, impl, mode, pg)
                    configs[impl] = zconfig(backend, keep_history, location,
                                            args.sqlite_synchronous)
                    entry['writes'].append(run_impl(
                        impl, 'write', '--objects', args.objects,
                        '--zconfig', configs[impl],
                        '--latency-commits', args.latency_commits,
                        '--threads', args.threads,
                        '--conflict-commits', args.conflict_commits))
                    entry['info'] = entry['writes'][-1]['info']
                    failed = entry['writes'][-1]['phases'].get(
                        'conflicts', {}).get('error')
                    if failed:
                        log(f'  conflict phase FAILED: {failed}')
                except WorkloadFailed as e:
                    entry['error'] = f'write: {e}'
                    log(f'  FAILED: {LABELS[impl]} on {backend} {label}:'
                        f'\n{e}')
        for round_ in range(args.repeat):
            for impl in alternate(round_):
                entry = cell[impl]
                if 'error' in entry:
                    continue
                log(f'{backend} {label}: {LABELS[impl]}: cold and hot read '
                    f'{round_ + 1}/{args.repeat}')
                try:
                    entry['reads'].append(run_impl(
                        impl, 'read', '--objects', args.objects,
                        '--zconfig', configs[impl], '--version', 1,
                        '--hot-repeat', args.hot_repeat))
                except WorkloadFailed as e:
                    entry['error'] = f'read: {e}'
                    log(f'  FAILED: {LABELS[impl]} read on {backend} '
                        f'{label}:\n{e}')
        cell['load_average'].append(os.getloadavg()[0])
        for impl in IMPLS:
            entry = cell[impl]
            if entry['writes']:
                entry['metrics'] = summarize(entry['writes'], entry['reads'])
        if not args.keep_data:
            for cleanup in cleanups.values():
                cleanup()


def run_floor(backend, args, pg, size):
    log(f'{backend}: floor (bare driver, no ZODB)')
    common = ['--objects', args.objects, '--size', size,
              '--repeat', args.repeat,
              '--latency-commits', args.latency_commits]
    if backend == 'postgresql':
        pg.create('bench_floor')
        try:
            return workload(sys.executable, 'floor-postgresql', *common,
                            '--dsn', pg.dsn('bench_floor'))
        finally:
            pg.drop('bench_floor')
    path = DATA / 'floor'
    path.mkdir(parents=True, exist_ok=True)
    synchronous = args.sqlite_synchronous
    if synchronous == 'default':
        synchronous = 'full'    # our adapter's default
    try:
        return workload(sys.executable, 'floor-sqlite', *common,
                        '--data-dir', path, '--synchronous', synchronous)
    finally:
        shutil.rmtree(path, ignore_errors=True)


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


def environment(probes, pg_version):
    env = {
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec='seconds'),
        'cpus': os.cpu_count(),
        'cpu': cpu_model(),
        'platform': platform.platform(),
        'git': git_revision(),
        'load_average': [round(x, 2) for x in os.getloadavg()],
    }
    if pg_version:
        env['postgresql_server'] = pg_version
    for impl, info in probes.items():
        env[impl] = {k: v for k, v in info.items()
                     if k not in ('platform',)}
    return env


def describe_environment(env):
    lines = [
        f"date            {env['date']}",
        f"machine         {env['cpus']} CPUs ({env['cpu']}), "
        f"{env['platform']}",
    ]
    if 'postgresql_server' in env:
        lines.append(f"PostgreSQL      {env['postgresql_server']}")
    for impl in IMPLS:
        info = env.get(impl)
        if not info:
            continue
        name = ('ours' if impl == 'ours' else 'RelStorage 4.3')
        where = info['relstorage_file']
        driver = info.get('psycopg2-binary') or info.get('psycopg2')
        lines.append(
            f"{name:<15} relstorage {info['relstorage']} from {where}")
        lines.append(
            f"{'':<15} Python {info['python']}, ZODB {info.get('ZODB')}, "
            f"persistent {info.get('persistent')}, BTrees "
            f"{info.get('BTrees')}, psycopg2 {driver}, SQLite "
            f"{info.get('sqlite')}")
    lines.append(f"ours at         git {env['git']}")
    lines.append(f"load average    {env['load_average']} at the start")
    return '\n'.join(lines)


def fmt(value, kind):
    if value is None:
        return '-'
    if kind == 'latency':
        return f'{value:.2f}'
    return f'{value:,.0f}'


def as_seconds(value, kind):
    """The time one unit of work takes (lower is better)."""
    return value / 1000 if kind == 'latency' else 1 / value


def ratio(ours, ref, kind):
    """How many times faster ours is (> 1.0: ours is faster)."""
    if not ours or not ref:
        return None
    return as_seconds(ref, kind) / as_seconds(ours, kind)


def times_floor(value, floor, kind):
    if not value or not floor:
        return None
    return as_seconds(value, kind) / as_seconds(floor, kind)


def table(backend, mode, cell, floor, conflicts_note):
    metrics = {impl: cell.get(impl, {}).get('metrics', {}) for impl in IMPLS}
    header = ('phase', 'unit', 'ours', 'RS 4.3', 'ratio', 'floor',
              'ours/floor', '4.3/floor')
    rows = []
    for key, label, kind in METRICS:
        ours = metrics['ours'].get(key)
        ref = metrics['ref'].get(key)
        if key == 'conflicts' and (ours or ref):
            label = f'{label} ({conflicts_note})'
        low = floor.get(key) if floor else None
        r = ratio(ours, ref, kind)
        fo = times_floor(ours, low, kind)
        fr = times_floor(ref, low, kind)
        rows.append((label, UNITS[kind], fmt(ours, kind), fmt(ref, kind),
                     '-' if r is None else f'{r:.2f}',
                     fmt(low, kind),
                     '-' if fo is None else f'{fo:.1f}x',
                     '-' if fr is None else f'{fr:.1f}x'))
    widths = [max(len(str(row[i])) for row in rows + [header])
              for i in range(len(header))]

    def line(row):
        cells = [str(row[0]).ljust(widths[0]), str(row[1]).ljust(widths[1])]
        cells += [str(c).rjust(w) for c, w in zip(row[2:], widths[2:])]
        return '  '.join(cells)
    rule = '  '.join('=' * w for w in widths)
    label, keep = MODES[mode]
    title = (f'{"SQLite" if backend == "sqlite" else "PostgreSQL"}, {label} '
             f'(keep-history {"true" if keep else "false"})')
    out = [title, '-' * len(title), '', rule, line(header), rule]
    out += [line(row) for row in rows]
    out.append(rule)
    if 'load_average' in cell:
        first, last = cell['load_average']
        out.append(f'load average (1 min) {first:.2f} before these runs, '
                   f'{last:.2f} after')
    for impl in IMPLS:
        if 'error' in cell.get(impl, {}):
            out.append(f'{LABELS[impl]} FAILED: '
                       + cell[impl]['error'].splitlines()[-1])
        runs = [w['phases']['conflicts'] for w in
                cell.get(impl, {}).get('writes', ())
                if 'conflicts' in w['phases']]
        for run in runs:
            if 'error' in run:
                out.append(f'{LABELS[impl]}: conflicting commits FAILED in '
                           f'{sum("error" in r for r in runs)} of '
                           f'{len(runs)} runs: {run["error"]}')
                break
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
    return '\n'.join(out)


# -- main --------------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        description='Benchmark relstorage against RelStorage 4.3.')
    parser.add_argument('--backends', default='sqlite,postgresql',
                        help='comma-separated: sqlite, postgresql')
    parser.add_argument('--modes', default='hp,hf',
                        help='comma-separated: hp (history-preserving), '
                        'hf (history-free)')
    parser.add_argument('--objects', type=int,
                        help='objects written and read (default 20000, '
                        '2000 with --quick)')
    parser.add_argument('--quick', action='store_true',
                        help='a small run: a smoke test, not a measurement')
    parser.add_argument('--repeat', type=int,
                        help='write runs (each on a fresh database) and '
                        'read processes per implementation; medians are '
                        'reported (default 3, 1 with --quick)')
    parser.add_argument('--hot-repeat', type=int, default=3)
    parser.add_argument('--latency-commits', type=int,
                        help='single small commits timed (default 300)')
    parser.add_argument('--threads', type=int,
                        help='threads in the conflict phase (default 4)')
    parser.add_argument('--conflict-commits', type=int,
                        help='commits per thread in the conflict phase '
                        '(default 50)')
    parser.add_argument('--pg-dsn',
                        default='host=127.0.0.1 port=5432 user=root',
                        help='libpq connection string without dbname; the '
                        'user must be allowed to create databases')
    parser.add_argument('--sqlite-synchronous', default='default',
                        choices=('default', 'off', 'normal', 'full'),
                        help="SQLite's synchronous pragma for both sides; "
                        'default leaves each its own default')
    parser.add_argument('--json', default=str(HERE / 'results' /
                                              'latest.json'),
                        help='where to write the results')
    parser.add_argument('--keep-data', action='store_true',
                        help='keep the databases of the run')
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {'objects': (20000, 2000), 'repeat': (3, 1),
                'latency_commits': (300, 50), 'threads': (4, 2),
                'conflict_commits': (50, 10)}
    for name, (full, small) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    args.backends = [b.strip() for b in args.backends.split(',') if b]
    args.modes = [m.strip() for m in args.modes.split(',') if m]
    for b in args.backends:
        if b not in BACKENDS:
            parser.error(f'unknown backend {b!r}')
    for m in args.modes:
        if m not in MODES:
            parser.error(f'unknown mode {m!r}')
    return args


def main(argv=None):
    args = parse_args(argv)
    probes = {}
    for impl in IMPLS:
        if impl == 'ref':
            # After our side is known good: the reference environment is
            # pinned to our side's ZODB stack.
            refenv.ensure(log)
        try:
            probes[impl] = run_impl(impl, 'probe')['info']
        except WorkloadFailed as e:
            hint = ('run this script with the project\'s venv '
                    '(.venv/bin/python benchmarks/run.py, after pip '
                    "install -e '.[test]')" if impl == 'ours' else
                    f'delete {refenv.VENV} and run again')
            raise SystemExit(f'{LABELS[impl]}: cannot import the expected '
                             f'relstorage: {hint}\n{e}')
        log(f'{LABELS[impl]}: relstorage {probes[impl]["relstorage"]} from '
            f'{probes[impl]["relstorage_file"]} '
            f'({probes[impl]["executable"]})')
    pg = PostgreSQL(args.pg_dsn) if 'postgresql' in args.backends else None
    pg_version = pg.server_version() if pg else None
    env = environment(probes, pg_version)
    settings = {k: getattr(args, k) for k in (
        'backends', 'modes', 'objects', 'quick', 'repeat', 'hot_repeat',
        'latency_commits', 'threads', 'conflict_commits',
        'sqlite_synchronous')}
    results, floors = {}, {}
    for backend in args.backends:
        run_backend(backend, args.modes, args, pg, results)
        size = None
        for mode in args.modes:
            for impl in IMPLS:
                for write in results[backend][mode][impl]['writes']:
                    size = size or write['mean_state_size']
        try:
            floors[backend] = run_floor(backend, args, pg, size or 200)
        except WorkloadFailed as e:
            floors[backend] = {'error': str(e)}
            log(f'  FAILED: floor on {backend}:\n{e}')
    shutil.rmtree(DATA, ignore_errors=True) if not args.keep_data else None

    note = f'{args.threads} threads x {args.conflict_commits}'
    report = [
        '', 'Environment', '===========', '', describe_environment(env), '',
        f'{args.objects} objects; write figures: median of {args.repeat} '
        f'runs on fresh databases; cold read: median of {args.repeat} fresh '
        f'processes; hot read: best of {args.repeat * args.hot_repeat}; '
        f'{args.latency_commits} small commits; SQLite synchronous: '
        f'{args.sqlite_synchronous}.',
        'ratio = how many times faster ours is (> 1.0: ours is faster); '
        'x/floor = how many times the bare driver\'s time it takes.', '']
    for backend in args.backends:
        floor = floors.get(backend, {})
        low = summarize_floor(floor) if 'phases' in floor else {}
        for mode in args.modes:
            report.append(table(backend, mode, results[backend][mode], low,
                                note))
            report.append('')
        if 'phases' in floor:
            copy = floor['phases'].get('copy_all')
            extra = (f'; one COPY of all rows: {copy["rate"]:,.0f} rows/s'
                     if copy else '')
            report.append(
                f'floor on {backend}: {floor["driver"]}, rows of '
                f'{floor["row_size"]} bytes{extra}.')
            report.append('')
        elif floor:
            report.append(f'floor on {backend} FAILED: {floor["error"]}')
    env['load_average_end'] = [round(x, 2) for x in os.getloadavg()]
    report[4] += (f"\nload average    {env['load_average_end']} at the "
                  f"end")
    # The run itself keeps about two processes busy (the workload and the
    # database server); more than that means other work shared the machine.
    loads = [env['load_average'][0], env['load_average_end'][0]] + [
        value for b in results.values() for m in b.values()
        for value in m.get('load_average', ())]
    if max(loads) > (os.cpu_count() or 1) + 1:
        report.insert(5, f'\nWARNING: the load average reached '
                      f'{max(loads):.2f} on {os.cpu_count()} CPUs: other '
                      f'work shared the machine, and the figures are less '
                      f'reliable.')
    text = '\n'.join(report)
    print(text)
    document = {'environment': env, 'settings': settings,
                'results': results, 'floors': floors,
                'summary': {
                    b: {m: {impl: results[b][m][impl].get('metrics')
                            for impl in IMPLS}
                        for m in args.modes}
                    for b in args.backends},
                'floor_summary': {b: summarize_floor(f) for b, f in
                                  floors.items() if 'phases' in f},
                'report': text}
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + '\n')
    log(f'results written to {path}')
    failed = any('error' in results[b][m][impl] for b in args.backends
                 for m in args.modes for impl in IMPLS)
    return 1 if failed and not any(
        'metrics' in results[b][m]['ours'] for b in args.backends
        for m in args.modes) else 0


if __name__ == '__main__':
    sys.exit(main())
