"""The reference environment: RelStorage 4.3 from PyPI in its own venv.

``ensure()`` builds ``benchmarks/.venv-reference`` (or reuses it when it was
built from the same requirements, constraints and Python, and still imports
RelStorage 4.3 from inside itself).  The project's own venv is never
touched: both packages are called ``relstorage``, and each workload process
must see exactly one of them.
"""
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / '.venv-reference'
REQUIREMENTS = HERE / 'requirements-reference.txt'
MARKER = VENV / 'bench-env.json'
REFERENCE_VERSION = '4.3.0'

#: Held to the caller's versions so that both sides run one ZODB stack.
SHARED_STACK = ('ZODB', 'persistent', 'BTrees', 'transaction', 'ZConfig',
                'zodbpickle', 'zope.interface', 'psycopg2-binary',
                'mysqlclient')


def python():
    """The reference venv's interpreter."""
    if os.name == 'nt':
        return VENV / 'Scripts' / 'python.exe'
    return VENV / 'bin' / 'python'


def caller_constraints():
    """``{distribution: version}`` of the shared stack in this interpreter
    (the one that runs our side)."""
    found = {}
    for name in SHARED_STACK:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def clean_env():
    """The environment for a workload subprocess: nothing that could put
    another ``relstorage`` on its path."""
    env = dict(os.environ)
    for key in ('PYTHONPATH', 'PYTHONHOME', 'PYTHONSTARTUP',
                'PYTHONUSERBASE', 'VIRTUAL_ENV', '__PYVENV_LAUNCHER__'):
        env.pop(key, None)
    env['PYTHONNOUSERSITE'] = '1'
    env['PYTHONDONTWRITEBYTECODE'] = '1'
    return env


def _wanted(constraints):
    return {
        'python': sys.version,
        'base_prefix': sys.base_prefix,
        'requirements': REQUIREMENTS.read_text(),
        'constraints': constraints,
    }


def _probe():
    """What the venv's ``relstorage`` is, or None when it cannot say."""
    code = (
        'import json, relstorage; from importlib import metadata; '
        'print(json.dumps([relstorage.__file__, '
        'metadata.version("relstorage")]))')
    try:
        out = subprocess.run(
            [str(python()), '-I', '-c', code], capture_output=True,
            text=True, env=clean_env(), timeout=120, check=True).stdout
        path, version = json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return path, version


def _usable(wanted):
    if not MARKER.exists():
        return False
    try:
        if json.loads(MARKER.read_text()) != wanted:
            return False
    except ValueError:
        return False
    probe = _probe()
    if probe is None:
        return False
    path, version = probe
    return (version == REFERENCE_VERSION
            and Path(path).resolve().is_relative_to(VENV.resolve()))


def _pip(args, log):
    cmd = [str(python()), '-m', 'pip', 'install',
           '--disable-pip-version-check', '--no-input', '-q'] + args
    log('  $ ' + ' '.join(cmd))
    proc = subprocess.run(cmd, env=clean_env(), capture_output=True,
                          text=True)
    with open(VENV / 'pip.log', 'a') as f:
        f.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        lines = (proc.stderr + proc.stdout).strip().splitlines()
        log('\n'.join('  | ' + line for line in lines[-20:]))
    return proc.returncode == 0


def ensure(log=print):
    """Build or reuse the reference venv; returns its interpreter path."""
    constraints = caller_constraints()
    wanted = _wanted(constraints)
    if _usable(wanted):
        log(f'reference environment: reusing {VENV}')
        return python()
    log(f'reference environment: building {VENV} (RelStorage '
        f'{REFERENCE_VERSION} from PyPI)')
    if VENV.exists():
        shutil.rmtree(VENV)
    # The same base interpreter as our side, so that Python itself is not
    # a difference between the two.
    subprocess.run([sys.executable, '-m', 'venv', str(VENV)],
                   env=clean_env(), check=True)
    pinned = VENV / 'constraints.txt'
    pinned.write_text(''.join(f'{k}=={v}\n' for k, v in constraints.items()))
    if not _pip(['-r', str(REQUIREMENTS), '-c', str(pinned)], log):
        log('reference environment: pip cannot hold the ZODB stack to our '
            'versions; installing what RelStorage 4.3 asks for instead')
        wanted['constraints'] = {}
        pinned.write_text('')
        if not _pip(['-r', str(REQUIREMENTS)], log):
            raise SystemExit('cannot install the reference environment '
                             f'from {REQUIREMENTS}')
    probe = _probe()
    if probe is None or probe[1] != REFERENCE_VERSION:
        raise SystemExit(f'the reference environment does not import '
                         f'RelStorage {REFERENCE_VERSION}: {probe!r}')
    MARKER.write_text(json.dumps(wanted, indent=1))
    return python()


if __name__ == '__main__':
    print(ensure())
