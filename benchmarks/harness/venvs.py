"""The other interpreters a benchmark runs: venvs built from PyPI on first
use, and reused while what they were built from is unchanged.

``Venv`` is the mechanism: a marker file (``bench-env.json``) records what
a venv was built from; when it differs, or the venv no longer imports the
``relstorage`` it should, the venv is built again.  ``reference()`` is the
RelStorage 4.3 venv (``benchmarks/.venv-reference``) of run.py, blobs.py,
convert.py and pack.py; plone.py builds its Plone venvs the same way.
The project's own venv is never touched: both packages are called
``relstorage``, and each workload process must see exactly one of them.

    python -m harness.venvs      # (in benchmarks/) build or reuse the
                                 # reference venv; prints its python
"""
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from . import BENCH

REFERENCE = BENCH / '.venv-reference'
REFERENCE_REQUIREMENTS = BENCH / 'requirements-reference.txt'
REFERENCE_VERSION = '4.3.0'

#: Held to the caller's versions so that both sides run one ZODB stack.
SHARED_STACK = ('ZODB', 'persistent', 'BTrees', 'transaction', 'ZConfig',
                'zodbpickle', 'zope.interface', 'psycopg2-binary',
                'mysqlclient')


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


class Venv:
    """A venv under ``benchmarks/`` that a benchmark builds for itself."""

    def __init__(self, path):
        self.path = Path(path)
        self.marker = self.path / 'bench-env.json'

    @property
    def python(self):
        if os.name == 'nt':
            return self.path / 'Scripts' / 'python.exe'
        return self.path / 'bin' / 'python'

    def built_from(self, wanted):
        """Whether the marker says it was built from ``wanted``."""
        try:
            return json.loads(self.marker.read_text()) == wanted
        except (OSError, ValueError):
            return False

    def create(self):
        """A new, empty venv of this interpreter's base Python, so that
        Python itself is not a difference between the sides."""
        if self.path.exists():
            shutil.rmtree(self.path)
        subprocess.run([sys.executable, '-m', 'venv', str(self.path)],
                       env=clean_env(), check=True)

    def pip(self, words, log):
        """``pip install WORDS``; True when it succeeded.  The output goes
        to ``pip.log`` in the venv, its end to ``log`` when it failed."""
        cmd = [str(self.python), '-m', 'pip', 'install',
               '--disable-pip-version-check', '--no-input'] + words
        log('  $ ' + ' '.join(cmd))
        proc = subprocess.run(cmd, env=clean_env(), capture_output=True,
                              text=True)
        with open(self.path / 'pip.log', 'a') as f:
            f.write(' '.join(cmd) + '\n' + proc.stdout + proc.stderr)
        if proc.returncode != 0:
            lines = (proc.stderr + proc.stdout).strip().splitlines()
            log('\n'.join('  | ' + line for line in lines[-20:]))
        return proc.returncode == 0

    def seal(self, wanted):
        self.marker.write_text(json.dumps(wanted, indent=1))

    def imports_from(self, home, version=None):
        """Whether its ``relstorage`` comes from under ``home`` (and is
        ``version``, when given)."""
        code = ('import json, relstorage; from importlib import metadata; '
                'print(json.dumps([relstorage.__file__, '
                'metadata.version("relstorage")]))')
        try:
            out = subprocess.run(
                [str(self.python), '-I', '-c', code], capture_output=True,
                text=True, env=clean_env(), timeout=120, check=True).stdout
            path, found = json.loads(out.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return False
        return ((version is None or found == version)
                and Path(path).resolve().is_relative_to(
                    Path(home).resolve()))


def reference(log=print):
    """Build or reuse the RelStorage 4.3 venv; returns its interpreter.

    Built from requirements-reference.txt, holding the shared stack to this
    interpreter's versions when pip can (else to what 4.3 asks for); reused
    while built from the same requirements, constraints and Python, and
    still importing RelStorage 4.3.0 from inside itself."""
    venv = Venv(REFERENCE)
    constraints = caller_constraints()
    wanted = {'python': sys.version, 'base_prefix': sys.base_prefix,
              'requirements': REFERENCE_REQUIREMENTS.read_text(),
              'constraints': constraints}
    if venv.built_from(wanted) and venv.imports_from(REFERENCE,
                                                     REFERENCE_VERSION):
        log(f'reference environment: reusing {REFERENCE}')
        return venv.python
    log(f'reference environment: building {REFERENCE} (RelStorage '
        f'{REFERENCE_VERSION} from PyPI)')
    venv.create()
    pinned = REFERENCE / 'constraints.txt'
    pinned.write_text(''.join(f'{k}=={v}\n' for k, v in constraints.items()))
    if not venv.pip(['-q', '-r', str(REFERENCE_REQUIREMENTS), '-c',
                     str(pinned)], log):
        log('reference environment: pip cannot hold the ZODB stack to our '
            'versions; installing what RelStorage 4.3 asks for instead')
        wanted['constraints'] = {}
        pinned.write_text('')
        if not venv.pip(['-q', '-r', str(REFERENCE_REQUIREMENTS)], log):
            raise SystemExit('cannot install the reference environment '
                             f'from {REFERENCE_REQUIREMENTS}')
    if not venv.imports_from(REFERENCE, REFERENCE_VERSION):
        raise SystemExit(f'the reference environment does not import '
                         f'RelStorage {REFERENCE_VERSION} from {REFERENCE}')
    venv.seal(wanted)
    return venv.python


def reference_python():
    """The reference venv's interpreter (built or not)."""
    return Venv(REFERENCE).python


if __name__ == '__main__':
    print(reference())
