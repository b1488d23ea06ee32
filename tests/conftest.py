"""Fixtures shared by all tests: the database backends."""
import pytest

from backends import BACKENDS


MARKERS = {'sqlite': 'sqlite', 'postgresql': 'postgresql',
           'postgresql-psycopg': 'postgresql', 'mysql': 'mysql',
           'mysql-pymysql': 'mysql', 'oracle': 'oracle'}


def pytest_configure(config):
    for marker in ('sqlite', 'postgresql', 'mysql', 'oracle'):
        config.addinivalue_line(
            'markers', f'{marker}: the test runs against {marker}')


@pytest.fixture(params=[
    pytest.param(name, marks=getattr(pytest.mark, MARKERS[name]))
    for name in BACKENDS
])
def backend(request):
    """A database backend; its databases are dropped after the test."""
    instance = BACKENDS[request.param]()
    yield instance
    instance.cleanup()


@pytest.fixture(params=[True, False], ids=['hp', 'hf'])
def keep_history(request):
    return request.param


@pytest.fixture
def database(backend):
    """A fresh, empty database of the current backend."""
    return backend.new_database()


@pytest.fixture
def open_storage(backend, database, keep_history):
    """Open storages on the test's database; all are closed afterwards."""
    opened = []

    def open_(**options):
        options.setdefault('keep_history', keep_history)
        storage = backend.open(database, **options)
        opened.append(storage)
        return storage

    yield open_
    for storage in opened:
        storage.close()


def pytest_terminal_summary(terminalreporter):
    """Print how many of ZODB's conformance tests ran, per backend and
    suite, so that a silent loss of collected mixin methods shows; and what
    the fault, replica and hostile-input tests tried (tests/tally.py)."""
    import tally
    if tally.COUNTS:
        terminalreporter.write_sep('-', 'faults, replicas, hostile input')
        groups = {}
        for (group, what), n in sorted(tally.COUNTS.items()):
            groups.setdefault(group, []).append(f'{n:,} {what}')
        for group, parts in groups.items():
            terminalreporter.write_line(f'{group}: {", ".join(parts)}')
    counts = {}
    for outcome in ('passed', 'failed', 'skipped', 'error'):
        for report in terminalreporter.stats.get(outcome, ()):
            nodeid = getattr(report, 'nodeid', '')
            if 'test_conformance.py::' not in nodeid or '[' not in nodeid:
                continue
            if outcome != 'error' and report.when not in ('call', 'setup'):
                continue
            if outcome == 'passed' and report.when != 'call':
                continue
            params = nodeid.split('[', 1)[1].rstrip(']')
            backend, _, test = params.rpartition('-')
            key = f'{backend}: {test.split(".", 1)[0]}'
            per = counts.setdefault(key, {})
            per[outcome] = per.get(outcome, 0) + 1
    if counts:
        terminalreporter.write_sep('-', 'ZODB conformance tests by suite')
        total = 0
        for key in sorted(counts):
            ran = sum(counts[key].values())
            total += ran
            detail = ', '.join(
                f'{n} {o}' for o, n in sorted(counts[key].items()))
            terminalreporter.write_line(f'{key}: {ran} ({detail})')
        terminalreporter.write_line(f'ZODB mixin tests in total: {total}')
