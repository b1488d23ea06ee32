"""What Plone users feel: a Plone 6.2 site on our relstorage, on RelStorage
4.3 and on FileStorage, step by step.  Run by hand, never in CI (each Plone
venv is some 300 packages).

    .venv/bin/python benchmarks/plone.py [--backends sqlite,postgresql,mysql]
        [--modes hp,hf] [--sides ours,rs43,filestorage] [--pages 500]
        [--images 100] [--quick]

Two venvs are built from PyPI on first use and reused while they were built
from the same requirements (``requirements-plone.txt``,
``constraints-plone.txt``, the Python, the shared ZODB stack of this
interpreter; a marker file ``bench-env.json`` in each records it):
``benchmarks/.venv-plone-ours`` (Plone and this checkout, editable) and
``benchmarks/.venv-plone-rs43`` (Plone and RelStorage 4.3.0, every other
distribution held to the versions of the first, so the two differ in
relstorage only).  FileStorage runs in the first.

For each backend, history mode and side, on a fresh database
(``bench_plone_<side>_<mode>``) and blob directory, a Zope instance
directory under ``benchmarks/data/plone/`` gets a generated zope.conf
(``%import relstorage``, ``<relstorage>`` with ``keep-history``,
``blob-dir`` and ``shared-blob-dir false``, the adapter section of
backends.py, every other option left to each side's default; or
``<filestorage>`` with ``blob-dir``), and plone_workload.py runs each step
in a fresh process with that venv's interpreter: site, content, search,
render (cold, then warm), edit, pack, and a final verify (untimed).  Only
the step is timed, never Zope's start-up.  See README.rst.
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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import backends  # noqa: E402
import mariadb_patch  # noqa: E402
import refenv  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
from backends import BACKENDS, DATA, MODES, TITLES  # noqa: E402

WORKLOAD = HERE / 'plone_workload.py'
REQUIREMENTS = HERE / 'requirements-plone.txt'
CONSTRAINTS = HERE / 'constraints-plone.txt'
WORK = DATA / 'plone'
#: Where --profile leaves each step's cProfile data (kept).
PROFILES = DATA / 'plone-profiles'
SIDES = ('ours', 'rs43', 'filestorage')
LABELS = {'ours': 'ours', 'rs43': 'RS 4.3', 'filestorage': 'FileStorage'}
VENVS = {'ours': HERE / '.venv-plone-ours', 'rs43': HERE / '.venv-plone-rs43'}
REFERENCE_VERSION = refenv.REFERENCE_VERSION
#: (key, label): the figures of the table, in seconds.  'search_warm' and
#: 'render_warm' are the second pass of their step's process.
FIGURES = (
    ('site', 'create the Plone site'),
    ('content', 'add {pages} pages, {images} images'),
    ('search', 'catalog queries, cold'),
    ('search_warm', 'catalog queries, warm'),
    ('render', 'render {render} pages, cold'),
    ('render_warm', 'render {render} pages, warm'),
    ('edit', 'edit {edits} pages'),
    ('pack', 'pack (days=0)'),
)
STEPS = ('site', 'content', 'search', 'render', 'edit', 'pack', 'verify')

_started = time.monotonic()


def log(message):
    print(f'[{time.monotonic() - _started:7.1f}s] {message}', flush=True)


# -- the venvs -----------------------------------------------------------------

def venv_python(side):
    return VENVS[side] / 'bin' / 'python'


def pip(side, words, logfile):
    """``pip install`` in the side's venv; True when it succeeded (the
    output goes to ``logfile``, the last lines to the log when it failed)."""
    cmd = [str(venv_python(side)), '-m', 'pip', 'install',
           '--disable-pip-version-check', '--no-input'] + words
    log('  $ ' + ' '.join(cmd))
    proc = subprocess.run(cmd, env=refenv.clean_env(), capture_output=True,
                          text=True)
    with open(logfile, 'a') as f:
        f.write(' '.join(cmd) + '\n' + proc.stdout + proc.stderr)
    if proc.returncode != 0:
        lines = (proc.stderr + proc.stdout).strip().splitlines()
        log('\n'.join('  | ' + line for line in lines[-20:]))
    return proc.returncode == 0


def probe(side):
    """The venv's versions (plone_workload.py probe), or None."""
    try:
        return run_json([str(venv_python(side)), '-I', str(WORKLOAD),
                         'probe'], 300, None)
    except (run.WorkloadFailed, OSError):
        return None


def expected_home(side):
    return REPO / 'src' if side == 'ours' else VENVS['rs43']


def usable(side, info):
    """Whether the venv imports the relstorage it should."""
    if not info or not info.get('relstorage_file'):
        return False
    where = Path(info['relstorage_file']).resolve()
    if not where.is_relative_to(expected_home(side).resolve()):
        return False
    return side == 'ours' or info['relstorage'] == REFERENCE_VERSION


def held_versions(info):
    """``name==version`` lines of everything in the ours venv but
    relstorage (which the rs43 venv gets from PyPI) and pip itself."""
    skip = {'relstorage', 'pip', 'setuptools'}
    return ''.join(line + '\n' for line in info['installed']
                   if line.split('==')[0].lower() not in skip)


def ensure_venv(side, held=None):
    """Build or reuse one Plone venv; returns its probe."""
    venv = VENVS[side]
    marker = venv / 'bench-env.json'
    wanted = {'python': sys.version, 'base_prefix': sys.base_prefix,
              'requirements': REQUIREMENTS.read_text(),
              'constraints': CONSTRAINTS.read_text(),
              'shared_stack': refenv.caller_constraints(),
              'held': held}
    if marker.exists():
        try:
            same = json.loads(marker.read_text()) == wanted
        except ValueError:
            same = False
        if same:
            info = probe(side)
            if usable(side, info):
                log(f'{side} Plone venv: reusing {venv}')
                return info
    log(f'{side} Plone venv: building {venv} (Plone from PyPI; this takes '
        f'a few minutes)')
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([sys.executable, '-m', 'venv', str(venv)],
                   env=refenv.clean_env(), check=True)
    logfile = venv / 'pip.log'
    shared = venv / 'shared-stack.txt'
    shared.write_text(''.join(f'{k}=={v}\n' for k, v in
                              wanted['shared_stack'].items()))
    base = ['-r', str(REQUIREMENTS), '-c', str(CONSTRAINTS)]
    if side == 'ours':
        words = base + ['-c', str(shared), '-e', str(REPO)]
    else:
        base.append(f'relstorage=={REFERENCE_VERSION}')
        pinned = venv / 'held.txt'
        pinned.write_text(held or '')
        words = base + ['-c', str(pinned)]
    ok = pip(side, ['-U', 'pip'], logfile) and pip(side, words, logfile)
    if not ok and side == 'rs43' and held:
        log("rs43 Plone venv: pip cannot hold it to the ours venv's "
            "versions; installing with the constraints file alone")
        wanted['held'] = None
        ok = pip(side, base, logfile)
    if not ok:
        raise SystemExit(f'cannot build {venv}; see {logfile}')
    info = probe(side)
    if not usable(side, info):
        raise SystemExit(f'{venv} does not import the expected relstorage: '
                         f'{info and info.get("relstorage_file")}')
    marker.write_text(json.dumps(wanted, indent=1))
    return info


# -- one instance ----------------------------------------------------------------

#: The instance's site.zcml: Zope's own configuration and every product
#: (Products.CMFPlone among them), as a generated Zope instance has.
SITE_ZCML = '''<configure xmlns="http://namespaces.zope.org/zope"
           xmlns:five="http://namespaces.zope.org/five">
  <include package="Zope2.App" />
  <five:loadProducts file="meta.zcml" />
  <five:loadProducts />
  <five:loadProductsOverrides />
</configure>
'''
#: ZODB's object cache per connection, as Plone's instances usually have.
CACHE_SIZE = 30000


def zope_conf(directory, storage, imports=''):
    return (f'%define INSTANCE {directory}\n'
            f'instancehome $INSTANCE\n'
            f'clienthome $INSTANCE/var\n'
            f'debug-mode off\n'
            f'{imports}'
            f'<zodb_db main>\n'
            f'  mount-point /\n'
            f'  cache-size {CACHE_SIZE}\n'
            + ''.join(f'  {line}\n' for line in storage.splitlines()) +
            '</zodb_db>\n')


class Instance:
    """A fresh storage and the Zope instance directory around it."""

    def __init__(self, side, backend, mode, database):
        self.side, self.backend, self.mode = side, backend, mode
        tag = ('filestorage' if side == 'filestorage'
               else f'{backend}-{side}-{mode}')
        self.directory = WORK / tag
        shutil.rmtree(self.directory, ignore_errors=True)
        (self.directory / 'etc').mkdir(parents=True)
        (self.directory / 'var').mkdir()
        blobs = self.directory / 'var' / 'blobs'
        self.database, self.name = database, None
        if side == 'filestorage':
            storage = (f'<filestorage>\n  path $INSTANCE/var/Data.fs\n'
                       f'  blob-dir {blobs}\n</filestorage>')
            imports = ''
        else:
            self.name = f'bench_plone_{side}_{mode}'
            database.create(self.name)
            text = backends.relstorage_zconfig(
                database, 'ours' if side == 'ours' else 'ref', self.name,
                MODES[mode][1], [f'blob-dir {blobs}',
                                 'shared-blob-dir false'])
            imports, storage = text.split('\n', 1)
            imports += '\n'
        (self.directory / 'etc' / 'zope.conf').write_text(
            zope_conf(self.directory, storage, imports))
        (self.directory / 'etc' / 'site.zcml').write_text(SITE_ZCML)

    def remove(self):
        if self.name:
            self.database.drop(self.name)
        shutil.rmtree(self.directory, ignore_errors=True)


def run_json(cmd, timeout, logfile):
    """Run ``cmd`` with ``--out FILE``; its JSON, or WorkloadFailed with the
    end of its stderr (all of it in ``logfile``)."""
    out = WORK / f'out-{os.getpid()}.json'
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(cmd + ['--out', str(out)],
                              env=refenv.clean_env(), cwd=str(HERE),
                              capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise run.WorkloadFailed(f'ran longer than {timeout:.0f} s')
    try:
        if logfile:
            with open(logfile, 'a') as f:
                f.write(f'$ {" ".join(cmd)}\n{proc.stderr}{proc.stdout}')
        if proc.returncode != 0:
            raise run.WorkloadFailed(
                run.tail(proc.stderr or proc.stdout, 8)
                or f'exit status {proc.returncode}')
        return json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)


def measure(side, backend, mode, database, args):
    """Every step of one side on a fresh storage: ``{'steps': {step:
    result}}``, and ``error`` (the step and why) when one failed."""
    instance = Instance(side, backend, mode, database)
    python = venv_python('rs43' if side == 'rs43' else 'ours')
    flags = []
    if side != 'filestorage':
        flags += ['--expect-under', str(expected_home(side))]
    if side == 'rs43' and backend == 'mysql':
        flags.append('--patch-mariadb')
    counts = ['--pages', args.pages, '--images', args.images, '--render',
              args.render, '--edits', args.edits, '--seed', args.seed]
    logfile = instance.directory / 'steps.log'
    entry = {'steps': {}, 'zope_conf': (instance.directory / 'etc' /
                                        'zope.conf').read_text(),
             'load_average': [round(os.getloadavg()[0], 2)]}
    try:
        for step in STEPS:
            extra = (['--after-edit', '--all-images'] if step == 'verify'
                     else [])
            if args.profile and step != 'verify':
                PROFILES.mkdir(parents=True, exist_ok=True)
                extra += ['--profile', str(
                    PROFILES / f'{instance.directory.name}-{step}.prof')]
            cmd = ([str(python), '-I', str(WORKLOAD), step, '--instance',
                    str(instance.directory)] + flags
                   + [str(c) for c in counts] + extra)
            try:
                result = run_json(cmd, args.timeout, logfile)
            except run.WorkloadFailed as e:
                entry['error'] = {'step': step, 'message': str(e),
                                  'log': str(logfile)}
                log(f'  {LABELS[side]} FAILED in {step}: '
                    + str(e).strip().splitlines()[-1])
                break
            entry['steps'][step] = result
            if step != 'verify':
                warm = (f', warm {result["warm_seconds"]:.2f} s'
                        if 'warm_seconds' in result else '')
                log(f'  {LABELS[side]:<11} {step:<8} '
                    f'{result["seconds"]:8.2f} s{warm}')
        entry['verified'] = 'verify' in entry['steps']
        entry['load_average'].append(round(os.getloadavg()[0], 2))
    finally:
        if args.keep_data or 'error' in entry:
            entry['kept'] = str(instance.directory)
            if instance.name and not args.keep_data:
                instance.database.drop(instance.name)
        else:
            instance.remove()
    return entry


def figures(entry):
    """``{figure: seconds}`` of one side's run."""
    steps = entry.get('steps', {})
    out = {}
    for key, _ in FIGURES:
        step, _, warm = key.partition('_')
        if step in steps:
            out[key] = steps[step]['warm_seconds' if warm else 'seconds']
    return out


def median_figures(entries):
    runs = [figures(e) for e in entries]
    keys = [k for k, _ in FIGURES if all(k in r for r in runs)]
    return {k: statistics.median(r[k] for r in runs) for k in keys}


# -- the report ------------------------------------------------------------------

def seconds(value):
    if value is None:
        return '-'
    return f'{value:.3f}' if value < 1 else f'{value:.2f}'


def quotient(a, b):
    return None if a is None or b is None or not b else a / b


def ratio_text(value):
    return '-' if value is None else f'{value:.2f}'


def cell_table(backend, mode, cell, fs, args):
    """One backend and mode: seconds of each side, ours / RS 4.3 and ours /
    FileStorage (times: below 1.0, ours is faster); and the checks."""
    ours, ref = cell.get('ours'), cell.get('rs43')
    where = f'{TITLES[backend]} {MODES[mode][0]}'
    header = ('step', 'ours s', 'RS 4.3 s', 'ours/4.3', 'FileStorage s',
              'ours/FS', 'verdict')
    rows, checks = [], []
    for key, label in FIGURES:
        o = ours.get(key) if ours is not None else None
        r = ref.get(key) if ref is not None else None
        f = fs.get(key) if fs is not None else None
        vs_ref, vs_fs = quotient(o, r), quotient(o, f)
        verdict = []
        if ours is not None and ref is not None:
            ok = None if vs_ref is None else vs_ref <= 1.0
            checks.append({'where': where, 'phase': key,
                           'label': label.format(**vars(args)),
                           'against': 'RS 4.3', 'value': vs_ref,
                           'target': 1.0, 'ok': ok})
            verdict.append({True: 'ok', False: 'MISS', None: 'n/a'}[ok])
        if backend == 'postgresql' and key == 'site' and fs is not None:
            ok = None if vs_fs is None else vs_fs <= 1.0
            checks.append({'where': where, 'phase': key,
                           'label': label.format(**vars(args)),
                           'against': 'FileStorage', 'value': vs_fs,
                           'target': 1.0, 'ok': ok})
            verdict.append({True: 'ok FS', False: 'MISS FS',
                            None: 'n/a FS'}[ok])
        rows.append((label.format(**vars(args)), seconds(o), seconds(r),
                     ratio_text(vs_ref), seconds(f), ratio_text(vs_fs),
                     ', '.join(verdict) or '-'))
    lines = report.title(where)
    lines += report.render(header, rows, right_from=1)
    return lines, checks


def load_line(runs_of_sides):
    """The machine's load (1 min) at the start and end of the runs: other
    work on it slows every side, and not evenly."""
    loads = [x for runs in runs_of_sides for e in runs
             for x in e.get('load_average', [])]
    if not loads:
        return []
    return [f'load average (1 min) from {min(loads):.1f} to '
            f'{max(loads):.1f} at the starts and ends of these runs']


def failure_lines(results, fs_entry):
    out = []
    entries = [(f'{TITLES[b]} {MODES[m][0]}', side, e)
               for b, modes in results.items() for m, cell in modes.items()
               for side, runs in cell.items() for e in runs]
    entries += [('FileStorage', 'filestorage', e) for e in fs_entry or []]
    for where, side, entry in entries:
        if 'error' in entry:
            err = entry['error']
            out.append(f'FAILED  {where}, {LABELS[side]}, step '
                       f'{err["step"]}: '
                       + err['message'].strip().splitlines()[-1]
                       + f' (log: {err["log"]})')
    return out


def check_lines(checks):
    return report.target_lines(
        checks, lambda c: f'ours/{c["against"]} '
        + ('-' if c['value'] is None else f'{c["value"]:.2f}'),
        lambda c: f'<= {c["target"]:.2f}')


def describe(env):
    lines = [f"date            {env['date']}",
             f"machine         {env['cpus']} CPUs ({env['cpu']}), "
             f"{env['platform']}",
             f"ours at         git {env['git']}",
             f"load average    {env['load_average']} at the start"]
    for key, name in (('postgresql_server', 'PostgreSQL'),
                      ('mysql_server', 'MariaDB')):
        if key in env:
            lines.append(f'{name:<15} {env[key]}')
    for side, info in env['venvs'].items():
        lines.append(
            f"{side + ' venv':<15} Plone {info['Plone']} (Products.CMFPlone "
            f"{info['Products.CMFPlone']}, Zope {info['Zope']}, plone.api "
            f"{info['plone.api']}), Python {info['python']}, ZODB "
            f"{info['ZODB']}, persistent {info['persistent']}, BTrees "
            f"{info['BTrees']}, psycopg2 {info['psycopg2-binary']}, "
            f"mysqlclient {info['mysqlclient']}, SQLite {info['sqlite']}")
        lines.append(f"{'':<15} relstorage {info['relstorage']} from "
                     f"{info['relstorage_file']}")
    return lines


# -- main ------------------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        description='A Plone 6.2 site on our relstorage, RelStorage 4.3 '
        'and FileStorage: site creation, content, search, rendering, '
        'edits and pack.')
    parser.add_argument('--backends', default=','.join(BACKENDS),
                        help='comma-separated: sqlite, postgresql, mysql '
                        '(MariaDB)')
    parser.add_argument('--modes', default='hp,hf',
                        help='comma-separated: hp (history-preserving), '
                        'hf (history-free)')
    parser.add_argument('--sides', default=','.join(SIDES),
                        help='comma-separated: ours, rs43, filestorage')
    parser.add_argument('--pages', type=int,
                        help='pages created (default 500; 40 with --quick)')
    parser.add_argument('--images', type=int,
                        help='images created (default 100; 8 with --quick)')
    parser.add_argument('--render', type=int,
                        help='pages rendered cold, then warm (default 200; '
                        '20 with --quick)')
    parser.add_argument('--edits', type=int,
                        help='pages edited (default 100; 10 with --quick)')
    parser.add_argument('--quick', action='store_true',
                        help='small counts: a smoke test, not a measurement')
    parser.add_argument('--repeat', type=int, default=1,
                        help='runs per side, backend and mode, each on a '
                        'fresh storage, the sides alternating; the figures '
                        'are the medians (default 1)')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--timeout', type=float, default=3600,
                        help='seconds one step may take (default 3600)')
    run.add_server_options(parser)
    parser.add_argument('--sqlite-synchronous', default='default',
                        choices=('default', 'off', 'normal', 'full'),
                        help="SQLite's synchronous pragma for both sides; "
                        'default leaves each its own (FULL for ours, '
                        'NORMAL for 4.3)')
    parser.add_argument('--json', help='where to write the results '
                        '(default benchmarks/results/plone.json, '
                        'plone-quick.json with --quick)')
    parser.add_argument('--profile', action='store_true',
                        help='cProfile every step (then the times are not '
                        'comparable) and keep the data in '
                        'benchmarks/data/plone-profiles/<instance>-<step>'
                        '.prof')
    parser.add_argument('--keep-data', action='store_true',
                        help='keep the databases and instance directories')
    args = parser.parse_args(argv)
    for name, full, small in (('pages', 500, 40), ('images', 100, 8),
                              ('render', 200, 20), ('edits', 100, 10)):
        if getattr(args, name) is None:
            setattr(args, name, small if args.quick else full)
    if args.json is None:
        args.json = str(HERE / 'results' / (
            'plone-quick.json' if args.quick else 'plone.json'))
    args.backends = run.choose(parser, args.backends, BACKENDS, 'backend')
    args.modes = run.choose(parser, args.modes, MODES, 'mode')
    args.sides = run.choose(parser, args.sides, SIDES, 'side')
    return args


def environment(venvs, servers):
    env = {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
               timespec='seconds'),
           'cpus': os.cpu_count(), 'cpu': run.cpu_model(),
           'platform': platform.platform(), 'git': run.git_revision(),
           'load_average': [round(x, 2) for x in os.getloadavg()],
           'venvs': venvs}
    names = {'postgresql': 'postgresql_server', 'mysql': 'mysql_server'}
    for backend, version in servers.items():
        if backend in names:
            env[names[backend]] = version
    return env


def main(argv=None):
    args = parse_args(argv)
    started = time.monotonic()
    venvs = {'ours': ensure_venv('ours')}
    if 'rs43' in args.sides:
        venvs['rs43'] = ensure_venv('rs43', held_versions(venvs['ours']))
    databases = {b: run.database_for(b, args) for b in args.backends
                 if set(args.sides) - {'filestorage'}}
    env = environment(venvs, {b: d.server_version()
                              for b, d in databases.items()})
    lines = ['', 'Plone', '=====', ''] + describe(env) + ['']
    if 'mysql' in args.backends and 'rs43' in args.sides:
        lines += [f'NOTE: {mariadb_patch.DESCRIPTION}', '']
    lines += [
        f'Each step runs in a fresh process of its side\'s venv (Zope\'s '
        f'start-up not timed) on one storage made fresh for the run: '
        f'{args.pages} pages and {args.images} images, {args.render} pages '
        f'rendered over HTTP (waitress, anonymous), {args.edits} edits; '
        f'{args.repeat} run(s) per side, '
        + ('the median of each step.' if args.repeat > 1 else 'no repeat.')
        + ' Seconds; ours/4.3 and ours/FS are ratios of times (below 1.0: '
        'ours is faster).'
        + (' PROFILED (cProfile): the times are not comparable.'
           if args.profile else '')
        + (f' SQLite synchronous {args.sqlite_synchronous} on both sides.'
           if args.sqlite_synchronous != 'default' else ''), '']
    print('\n'.join(lines), flush=True)

    fs_runs = None
    if 'filestorage' in args.sides:
        log('FileStorage')
        fs_runs = [measure('filestorage', None, None, None, args)
                   for _ in range(args.repeat)]
        fs_load = [f'FileStorage: {x}' for x in load_line([fs_runs])]
        print('\n'.join(fs_load), flush=True)
        lines += fs_load + ['']
    fs = median_figures([e for e in fs_runs if 'error' not in e]) \
        if fs_runs and any('error' not in e for e in fs_runs) else None
    results, checks, turn = {}, [], 0
    relsides = [s for s in ('ours', 'rs43') if s in args.sides]
    for backend, database in databases.items():
        for mode in args.modes:
            log(f'{TITLES[backend]} {MODES[mode][0]}')
            cell = {side: [] for side in relsides}
            for _ in range(args.repeat):
                for side in run.alternate(relsides, turn):
                    cell[side].append(measure(side, backend, mode, database,
                                              args))
                turn += 1
            results.setdefault(backend, {})[mode] = cell
            good = {side: median_figures([e for e in runs
                                          if 'error' not in e])
                    if any('error' not in e for e in runs) else None
                    for side, runs in cell.items()}
            text, found = cell_table(backend, mode, good, fs, args)
            text += load_line(cell.values())
            checks += found
            print('\n'.join([''] + text), flush=True)
            lines += text + ['']
    if fs is not None and not databases:
        text, _ = cell_table('sqlite', 'hp', {}, fs, args)
        text[:2] = report.title('FileStorage alone')[:2]
        print('\n'.join([''] + text), flush=True)
        lines += text + ['']
    if not args.keep_data and WORK.exists() and not any(WORK.iterdir()):
        WORK.rmdir()
    tail = failure_lines(results, fs_runs)
    tail += [''] + check_lines(checks) if checks else []
    elapsed = time.monotonic() - started
    tail += ['', f'total run time {elapsed / 60:.1f} min']
    print('\n'.join(tail), flush=True)
    document = {
        'environment': env,
        'settings': {k: getattr(args, k) for k in (
            'backends', 'modes', 'sides', 'pages', 'images', 'render',
            'edits', 'quick', 'repeat', 'seed', 'profile',
            'sqlite_synchronous')},
        'requirements': REQUIREMENTS.read_text(),
        'constraints': CONSTRAINTS.read_text(),
        'filestorage': fs_runs, 'results': results,
        'summary': {'filestorage': fs, **{
            b: {m: {side: median_figures([e for e in runs
                                          if 'error' not in e])
                    for side, runs in cell.items()}
                for m, cell in modes.items()}
            for b, modes in results.items()}},
        'checks': checks,
        'reference_patch': (mariadb_patch.DESCRIPTION
                            if 'mysql' in args.backends
                            and 'rs43' in args.sides else None),
        'elapsed_seconds': elapsed,
        'report': '\n'.join(lines + tail)}
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=str) + '\n')
    log(f'results written to {path}')
    ours_failed = any('error' in e for modes in results.values()
                      for cell in modes.values()
                      for e in cell.get('ours', []))
    return 1 if ours_failed else 0


if __name__ == '__main__':
    sys.exit(main())
