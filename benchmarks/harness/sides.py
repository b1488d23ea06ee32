"""Who runs a benchmark, and in which order.

A ``Side`` is one implementation measured: ``ours`` (this interpreter,
whose ``relstorage`` must come from ``src/``), ``ref`` (RelStorage 4.3 in
the reference venv, with the MariaDB patch on ``mysql``), ``floor`` (the
bare driver, this interpreter, no relstorage), ``filestorage`` and
``zeo`` (this interpreter).  It builds the command line of a workload
script run under its interpreter, with ``--relay-control`` when its round
trips are counted (``relay_control``, see harness/roundtrips.py).

The sides of a comparison take turns: the first of a round goes last in
the next (ABBA...), so that neither always meets the machine in the state
the other left it (``Turns``).
"""
import sys
from pathlib import Path

from . import SRC
from .procs import Child, WorkloadFailed
from .venvs import REFERENCE, reference, reference_python

LABELS = {'ours': 'ours', 'ref': 'RS 4.3', 'floor': 'floor',
          'filestorage': 'FileStorage', 'zeo': 'ZEO'}
#: The two relstorages compared.
IMPLS = ('ours', 'ref')


class Side:
    """One implementation on one backend (``None``: not a database's):
    which interpreter runs it, where its relstorage must come from
    (``home``: by default the reference venv for ``ref``, ``src/`` for the
    others but the floor; False: not checked), the flags its workloads
    need, and the workload script it runs by default."""

    def __init__(self, impl, backend=None, workload=None, python=None,
                 home=None, label=None):
        self.impl = impl
        self.backend = backend
        self.label = label or LABELS[impl]
        self.program = workload
        if python is None:
            python = reference_python() if impl == 'ref' else sys.executable
        self.python = str(python)
        if home is None:
            home = {'ref': REFERENCE, 'floor': False}.get(impl, SRC)
        self.home = home or None
        self.flags = (['--patch-mariadb']
                      if backend == 'mysql' and impl == 'ref' else [])
        #: The control channel of the relay its workloads count the round
        #: trips of their phases through (None: not counted).
        self.relay_control = None

    def script(self, name):
        """A console script of its interpreter (not resolved: a venv's
        bin/python is a link to the base interpreter)."""
        return Path(self.python).parent / name

    def command(self, command, *args, script=None):
        """``python -I SCRIPT COMMAND --expect-under HOME FLAGS ARGS``
        (FLAGS: ``--patch-mariadb``, ``--relay-control HOST:PORT``)."""
        words = [self.python, '-I', script or self.program, command]
        if self.home is not None:
            words += ['--expect-under', self.home]
        flags = list(self.flags)
        if self.relay_control:
            flags += ['--relay-control', self.relay_control]
        return [str(w) for w in words + flags + list(args)]

    def start(self, command, *args, script=None, **options):
        """The workload process, started (see procs.Child)."""
        return Child(self.command(command, *args, script=script),
                     **options)

    def run(self, command, *args, timeout=1200, script=None, **options):
        """The workload's JSON document, once it has run."""
        return self.start(command, *args, script=script,
                          **options).result(timeout)


def prepare(impls, workload, log):
    """Probe each relstorage side (``workload``'s ``probe`` command), ours
    first: the reference venv is built only after our side is known good,
    since it is pinned to our side's ZODB stack.  Returns ``{impl: what
    the probe said}``; exits with a hint when a side imports the wrong
    relstorage."""
    probes = {}
    for impl in (i for i in IMPLS if i in impls):
        if impl == 'ref':
            reference(log)
        try:
            probes[impl] = Side(impl, workload=workload).run(
                'probe', timeout=300)['info']
        except WorkloadFailed as e:
            hint = ("run this script with the project's venv "
                    '(.venv/bin/python benchmarks/..., after pip install '
                    "-e '.[test,bench]')" if impl == 'ours' else
                    f'delete {REFERENCE} and run again')
            raise SystemExit(f'{LABELS[impl]}: cannot import the expected '
                             f'relstorage: {hint}\n{e}')
        info = probes[impl]
        log(f'{LABELS[impl]}: relstorage {info["relstorage"]} from '
            f'{info["relstorage_file"]} ({info["executable"]})')
    return probes


def alternate(sides, turn):
    """The sides in the order of one turn: as given, or reversed."""
    sides = list(sides)
    return sides if turn % 2 == 0 else sides[::-1]


class Turns:
    """The order of the sides over the rounds of a run (or of a part of
    it: start one where the alternation starts again)."""

    def __init__(self):
        self.turn = 0

    def rounds(self, sides, repeat):
        """``(round, side)`` for ``repeat`` rounds, each side once a round,
        who goes first alternating."""
        for round_ in range(repeat):
            for side in alternate(sides, self.turn):
                yield round_, side
            self.turn += 1
