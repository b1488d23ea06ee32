"""The schema migration steps, installed as ``relstorage.migrations``.

Version 1 is the first schema, kept beside each adapter.  Every later
version N is one step here, a directory ``NNNN-what/`` (``0002-blobs/``)
that holds plain SQL taking a database from version N-1 to N: one file per
database (``postgresql.sql``, ``mysql.sql``, ``sqlite.sql``), or one per
database and history mode (``postgresql-history-free.sql``) where the two
modes differ.  A step's last statement sets ``schema_version`` to N.

New databases are made by running version 1 and then every step, so each
step is run by every test that creates a database.
"""
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))

_STEP_DIR = re.compile(r'^(\d{4})-[a-z0-9-]+$')


def mode_name(keep_history):
    """``history-preserving`` or ``history-free``: the history mode as
    file names and messages write it."""
    return 'history-preserving' if keep_history else 'history-free'


class Step:
    """One migration step: from ``version - 1`` to ``version``."""

    def __init__(self, version, name):
        self.version = version
        self.name = name

    def path(self, database, keep_history):
        """The SQL file of this step for ``database`` (``postgresql``,
        ``mysql``, ``sqlite``) and history mode."""
        directory = os.path.join(HERE, self.name)
        for name in (f'{database}-{mode_name(keep_history)}.sql',
                     f'{database}.sql'):
            path = os.path.join(directory, name)
            if os.path.exists(path):
                return path
        raise FileNotFoundError(
            f'migration step {self.name} has no SQL for {database} '
            f'({mode_name(keep_history)}) in {directory}')

    def relative_path(self, database, keep_history):
        """``path`` as written in the source tree (for messages)."""
        path = self.path(database, keep_history)
        return 'migrations/' + os.path.relpath(path, HERE).replace(
            os.sep, '/')

    def __repr__(self):
        return f'<migration step {self.name}>'


def _discover():
    found = []
    for name in sorted(os.listdir(HERE)):
        match = _STEP_DIR.match(name)
        if match and os.path.isdir(os.path.join(HERE, name)):
            found.append(Step(int(match.group(1)), name))
    for expected, step in enumerate(found, start=2):
        if step.version != expected:
            raise RuntimeError(
                f'migration steps must be numbered 0002, 0003, ... without '
                f'gaps; found {step.name} where {expected:04d} was due')
    return found


STEPS = _discover()

#: The newest schema version, the one new databases are made at.
LATEST = STEPS[-1].version if STEPS else 1


def steps(from_version, to_version):
    """The steps that take a database from ``from_version`` to
    ``to_version``, in order."""
    return [step for step in STEPS
            if from_version < step.version <= to_version]
