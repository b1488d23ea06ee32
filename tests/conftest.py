"""Fixtures shared by all tests: the database backends."""
import pytest

from backends import BACKENDS


def pytest_configure(config):
    for name in BACKENDS:
        config.addinivalue_line(
            'markers', f'{name}: the test runs against {name}')


@pytest.fixture(params=[
    pytest.param(name, marks=getattr(pytest.mark, name)) for name in BACKENDS
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
    """Print how many of ZODB's conformance tests ran, per suite, so that a
    silent loss of collected mixin methods shows."""
    counts = {}
    for outcome in ('passed', 'failed', 'skipped', 'error'):
        for report in terminalreporter.stats.get(outcome, ()):
            if getattr(report, 'when', 'call') != 'call' and \
                    outcome != 'error':
                continue
            nodeid = report.nodeid
            if 'test_conformance.py::' not in nodeid:
                continue
            func = nodeid.split('::', 1)[1].split('[', 1)[0]
            params = nodeid.split('[', 1)[1].rsplit('-', 1)[0]
            key = f'{func}[{params}]'
            counts.setdefault(key, {}).setdefault(outcome, 0)
            counts[key][outcome] += 1
    if counts:
        terminalreporter.write_sep('-', 'ZODB conformance tests by suite')
        total = 0
        for key in sorted(counts):
            ran = sum(counts[key].values())
            total += ran
            detail = ', '.join(f'{n} {o}' for o, n in sorted(counts[key].items()))
            terminalreporter.write_line(f'{key}: {ran} ({detail})')
        terminalreporter.write_line(f'total ZODB mixin tests run: {total}')
