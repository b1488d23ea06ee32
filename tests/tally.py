"""Counts the fault, replica and hostile-input tests keep of what they
tried (scenarios, inputs, committed transactions checked), printed at the
end of the run by conftest.pytest_terminal_summary."""
import collections

#: (group, what) -> count
COUNTS = collections.Counter()


def add(group, what, n=1):
    """Count ``n`` more ``what`` (``'scenarios'``, ``'inputs'``,
    ``'committed transactions checked'``) for ``group``."""
    COUNTS[group, what] += n
