"""Counts the fault, replica and hostile-input tests keep of what they
tried (scenarios, inputs, committed transactions checked), printed at the
end of the run by conftest.pytest_terminal_summary.

Each test's counts travel in its teardown report (conftest takes them with
``take``), so that they reach the summary from pytest-xdist's workers too.
"""
import collections

#: (group, what) -> count, since the last ``take``.
COUNTS = collections.Counter()


def add(group, what, n=1):
    """Count ``n`` more ``what`` (``'scenarios'``, ``'inputs'``,
    ``'committed transactions checked'``) for ``group``."""
    COUNTS[group, what] += n


def take():
    """The counts since the last call, as ``[[group, what, n], ...]``
    (plain lists: they cross to xdist's controller), and start afresh."""
    taken = [[group, what, n] for (group, what), n in sorted(COUNTS.items())]
    COUNTS.clear()
    return taken
