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
harness/backends.py, every other option left to each side's default; or
``<filestorage>`` with ``blob-dir``), and plone_workload.py runs each step
in a fresh process with that venv's interpreter: site, content, search,
render (cold, then warm), edit, pack, and a final verify (untimed).  Only
the step is timed, never Zope's start-up.  See README.rst.
"""
import shutil
import sys
import time
from pathlib import Path

from harness import DATA, REPO, SRC, backends
from harness.backends import BACKENDS, MODES, TITLES
from harness.cli import Parser
from harness.environment import environment, load_average
from harness.figures import medians
from harness.procs import WorkloadFailed, run_json
from harness.report import (heading, log, patch_note, reference_patch,
                            render, run_time, show, target_lines, title,
                            write_results)
from harness.sides import Side, Turns
from harness.venvs import REFERENCE_VERSION, Venv, caller_constraints

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / 'plone_workload.py'
REQUIREMENTS = HERE / 'requirements-plone.txt'
CONSTRAINTS = HERE / 'constraints-plone.txt'
WORK = DATA / 'plone'
#: Where --profile leaves each step's cProfile data (kept).
PROFILES = DATA / 'plone-profiles'
SIDES = ('ours', 'rs43', 'filestorage')
LABELS = {'ours': 'ours', 'rs43': 'RS 4.3', 'filestorage': 'FileStorage'}
VENVS = {'ours': Venv(HERE / '.venv-plone-ours'),
         'rs43': Venv(HERE / '.venv-plone-rs43')}
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


# -- the venvs -----------------------------------------------------------------

def probe(name):
    """The venv's versions (plone_workload.py probe), or None."""
    try:
        return run_json([VENVS[name].python, '-I', WORKLOAD, 'probe'], 300)
    except (WorkloadFailed, OSError):
        return None


def expected_home(name):
    return SRC if name == 'ours' else VENVS['rs43'].path


def usable(name, info):
    """Whether the venv imports the relstorage it should."""
    if not info or not info.get('relstorage_file'):
        return False
    where = Path(info['relstorage_file']).resolve()
    if not where.is_relative_to(expected_home(name).resolve()):
        return False
    return name == 'ours' or info['relstorage'] == REFERENCE_VERSION


def held_versions(info):
    """``name==version`` lines of everything in the ours venv but
    relstorage (which the rs43 venv gets from PyPI) and pip itself."""
    skip = {'relstorage', 'pip', 'setuptools'}
    return ''.join(line + '\n' for line in info['installed']
                   if line.split('==')[0].lower() not in skip)


def ensure_venv(name, held=None):
    """Build or reuse one Plone venv; returns its probe."""
    venv = VENVS[name]
    wanted = {'python': sys.version, 'base_prefix': sys.base_prefix,
              'requirements': REQUIREMENTS.read_text(),
              'constraints': CONSTRAINTS.read_text(),
              'shared_stack': caller_constraints(),
              'held': held}
    if venv.built_from(wanted):
        info = probe(name)
        if usable(name, info):
            log(f'{name} Plone venv: reusing {venv.path}')
            return info
    log(f'{name} Plone venv: building {venv.path} (Plone from PyPI; this '
        f'takes a few minutes)')
    venv.create()
    shared = venv.path / 'shared-stack.txt'
    shared.write_text(''.join(f'{k}=={v}\n' for k, v in
                              wanted['shared_stack'].items()))
    base = ['-r', str(REQUIREMENTS), '-c', str(CONSTRAINTS)]
    if name == 'ours':
        words = base + ['-c', str(shared), '-e', str(REPO)]
    else:
        base.append(f'relstorage=={REFERENCE_VERSION}')
        pinned = venv.path / 'held.txt'
        pinned.write_text(held or '')
        words = base + ['-c', str(pinned)]
    ok = venv.pip(['-U', 'pip'], log) and venv.pip(words, log)
    if not ok and name == 'rs43' and held:
        log("rs43 Plone venv: pip cannot hold it to the ours venv's "
            "versions; installing with the constraints file alone")
        wanted['held'] = None
        ok = venv.pip(base, log)
    if not ok:
        raise SystemExit(f'cannot build {venv.path}; see '
                         f'{venv.path / "pip.log"}')
    info = probe(name)
    if not usable(name, info):
        raise SystemExit(f'{venv.path} does not import the expected '
                         f'relstorage: {info and info.get("relstorage_file")}')
    venv.seal(wanted)
    return info


def side_of(name, backend):
    """The harness's side for one of ours, rs43 and filestorage: the
    interpreter of its Plone venv (FileStorage: the ours venv's, with no
    relstorage to check)."""
    if name == 'filestorage':
        return Side('filestorage', workload=WORKLOAD,
                    python=VENVS['ours'].python, home=False)
    if name == 'rs43':
        return Side('ref', backend, WORKLOAD, VENVS['rs43'].python,
                    VENVS['rs43'].path)
    return Side('ours', backend, WORKLOAD, VENVS['ours'].python)


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
            storage = backends.relstorage_section(
                database, 'ours' if side == 'ours' else 'ref', self.name,
                MODES[mode][1], [f'blob-dir {blobs}',
                                 'shared-blob-dir false'])
            imports = '%import relstorage\n'
        (self.directory / 'etc' / 'zope.conf').write_text(
            zope_conf(self.directory, storage, imports))
        (self.directory / 'etc' / 'site.zcml').write_text(SITE_ZCML)

    def remove(self):
        if self.name:
            self.database.drop(self.name)
        shutil.rmtree(self.directory, ignore_errors=True)


def measure(side, backend, mode, database, args):
    """Every step of one side on a fresh storage: ``{'steps': {step:
    result}}``, and ``error`` (the step and why) when one failed."""
    instance = Instance(side, backend, mode, database)
    runner = side_of(side, backend)
    counts = ['--pages', args.pages, '--images', args.images, '--render',
              args.render, '--edits', args.edits, '--seed', args.seed]
    logfile = instance.directory / 'steps.log'
    entry = {'steps': {}, 'zope_conf': (instance.directory / 'etc' /
                                        'zope.conf').read_text(),
             'load_average': [load_average()[0]]}
    try:
        for step in steps_of(args):
            extra = (['--after-edit', '--all-images'] if step == 'verify'
                     else [])
            if args.storage_times and step != 'verify':
                extra.append('--storage-times')
            if args.profile and step != 'verify':
                PROFILES.mkdir(parents=True, exist_ok=True)
                extra += ['--profile', str(
                    PROFILES / f'{instance.directory.name}-{step}.prof')]
            try:
                result = runner.run(step, '--instance', instance.directory,
                                    *counts, *extra, timeout=args.timeout,
                                    logfile=logfile)
            except WorkloadFailed as e:
                entry['error'] = {'step': step, 'message': str(e),
                                  'log': str(logfile)}
                log(f'  {LABELS[side]} FAILED in {step}: '
                    + str(e).strip().splitlines()[-1])
                break
            entry['steps'][step] = result
            if step != 'verify':
                warm = (f', warm {result["warm_seconds"]:.2f} s'
                        if 'warm_seconds' in result else '')
                inside = (f' (storage {result["storage_times"]["total"]:.2f}'
                          f' s)' if 'storage_times' in result else '')
                log(f'  {LABELS[side]:<11} {step:<8} '
                    f'{result["seconds"]:8.2f} s{warm}{inside}')
        entry['verified'] = 'verify' in entry['steps']
        entry['load_average'].append(load_average()[0])
    finally:
        if args.keep_data or 'error' in entry:
            entry['kept'] = str(instance.directory)
            if instance.name and not args.keep_data:
                instance.database.drop(instance.name)
        else:
            instance.remove()
    return entry


def steps_of(args):
    """The steps to run: all of them, or up to ``--until`` (then without
    the final check, which expects every step's work)."""
    if args.until is None:
        return STEPS
    return STEPS[:STEPS.index(args.until) + 1]


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
    """The median of each figure over the runs that did not fail, or None
    when all failed."""
    good = [figures(e) for e in entries if 'error' not in e]
    return medians(good) if good else None


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
    ran = steps_of(args)
    for key, label in FIGURES:
        if key.partition('_')[0] not in ran:
            continue
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
    lines = title(where)
    lines += render(header, rows, right_from=1)
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
    return target_lines(
        checks, lambda c: f'ours/{c["against"]} '
        + ('-' if c['value'] is None else f'{c["value"]:.2f}'),
        lambda c: f'<= {c["target"]:.2f}')


# -- main ------------------------------------------------------------------------

def parse_args(argv):
    parser = Parser('A Plone 6.2 site on our relstorage, RelStorage 4.3 '
                    'and FileStorage: site creation, content, search, '
                    'rendering, edits and pack.')
    parser.choice('backends', BACKENDS, help='comma-separated: sqlite, '
                  'postgresql, mysql (MariaDB)')
    parser.choice('modes', MODES, help='comma-separated: hp '
                  '(history-preserving), hf (history-free)')
    parser.choice('sides', SIDES)
    parser.scaled('--pages', 500, 40,
                  help='pages created (default 500; 40 with --quick)')
    parser.scaled('--images', 100, 8,
                  help='images created (default 100; 8 with --quick)')
    parser.scaled('--render', 200, 20, help='pages rendered cold, then warm '
                  '(default 200; 20 with --quick)')
    parser.scaled('--edits', 100, 10,
                  help='pages edited (default 100; 10 with --quick)')
    parser.quick(help='small counts: a smoke test, not a measurement')
    parser.repeat(1, help='runs per side, backend and mode, each on a '
                  'fresh storage, the sides alternating; the figures are '
                  'the medians (default 1)')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--timeout', type=float, default=3600,
                        help='seconds one step may take (default 3600)')
    parser.servers()
    parser.add_argument('--until', choices=STEPS[:-1],
                        help='run the steps up to this one only (and not '
                        'the final check of everything the steps made)')
    parser.add_argument('--storage-times', action='store_true',
                        help="time the storage's calls within each step "
                        '(store, vote, finish, loads...) and the garbage '
                        "collector's passes: the per-method seconds go to "
                        'the results document, their sum to the log')
    parser.add_argument('--profile', action='store_true',
                        help='cProfile every step (then the times are not '
                        'comparable) and keep the data in '
                        'benchmarks/data/plone-profiles/<instance>-<step>'
                        '.prof')
    parser.results('plone.json', 'plone-quick.json',
                   keep_help='keep the databases and instance directories')
    return parser.parse(argv)


def main(argv=None):
    args = parse_args(argv)
    started = time.monotonic()
    venvs = {'ours': ensure_venv('ours')}
    if 'rs43' in args.sides:
        venvs['rs43'] = ensure_venv('rs43', held_versions(venvs['ours']))
    databases = {b: backends.database_for(b, args) for b in args.backends
                 if set(args.sides) - {'filestorage'}}
    env = environment({b: d.server_version() for b, d in databases.items()},
                      venvs=venvs)
    lines = heading(env, 'Plone')
    if 'mysql' in args.backends and 'rs43' in args.sides:
        lines += patch_note()
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
    show(lines)

    # FileStorage takes its turns in every backend and mode, beside the
    # relstorages it is compared with, rather than once before them: the
    # machine's state drifts over a run of an hour.
    fs_runs = None
    results, checks, turns = {}, [], Turns()
    sides = [s for s in ('ours', 'rs43', 'filestorage') if s in args.sides]
    for backend, database in databases.items():
        for mode in args.modes:
            log(f'{TITLES[backend]} {MODES[mode][0]}')
            cell = {side: [] for side in sides}
            for _, side in turns.rounds(sides, args.repeat):
                if side == 'filestorage':
                    cell[side].append(measure(side, None, None, None, args))
                else:
                    cell[side].append(measure(side, backend, mode, database,
                                              args))
            results.setdefault(backend, {})[mode] = cell
            good = {side: median_figures(runs)
                    for side, runs in cell.items()}
            text, found = cell_table(backend, mode, good,
                                     good.get('filestorage'), args)
            text += load_line(cell.values())
            checks += found
            show([''] + text)
            lines += text + ['']
    if 'filestorage' in args.sides and not databases:
        log('FileStorage')
        fs_runs = [measure('filestorage', None, None, None, args)
                   for _ in range(args.repeat)]
        text, _ = cell_table('sqlite', 'hp', {}, median_figures(fs_runs),
                             args)
        text[:2] = title('FileStorage alone')[:2]
        show([''] + text)
        lines += text + ['']
    if not args.keep_data and WORK.exists() and not any(WORK.iterdir()):
        WORK.rmdir()
    tail = failure_lines(results, fs_runs)
    tail += [''] + check_lines(checks) if checks else []
    tail += run_time(started)
    show(tail)
    write_results(args.json, {
        'environment': env,
        'settings': {k: getattr(args, k) for k in (
            'backends', 'modes', 'sides', 'pages', 'images', 'render',
            'edits', 'quick', 'repeat', 'seed', 'profile',
            'sqlite_synchronous')},
        'requirements': REQUIREMENTS.read_text(),
        'constraints': CONSTRAINTS.read_text(),
        'filestorage': fs_runs, 'results': results,
        'summary': {'filestorage': fs_runs and median_figures(fs_runs), **{
            b: {m: {side: median_figures(runs) or {}
                    for side, runs in cell.items()}
                for m, cell in modes.items()}
            for b, modes in results.items()}},
        'checks': checks,
        'reference_patch': (reference_patch()['description']
                            if 'mysql' in args.backends
                            and 'rs43' in args.sides else None),
        'elapsed_seconds': time.monotonic() - started,
        'report': '\n'.join(lines + tail)})
    ours_failed = any('error' in e for modes in results.values()
                      for cell in modes.values()
                      for e in cell.get('ours', []))
    return 1 if ours_failed else 0


if __name__ == '__main__':
    sys.exit(main())
