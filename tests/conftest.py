"""Fixtures shared by all tests: the database backends, storages and
databases opened on them, and worker processes."""
import pytest
import transaction
import ZODB

from backends import BACKENDS
from children import Worker


MARKERS = {'sqlite': 'sqlite', 'postgresql': 'postgresql',
           'postgresql-psycopg': 'postgresql', 'mysql': 'mysql',
           'mysql-pymysql': 'mysql', 'oracle': 'oracle'}


def pytest_configure(config):
    for marker in ('sqlite', 'postgresql', 'mysql', 'oracle'):
        config.addinivalue_line(
            'markers', f'{marker}: the test runs against {marker}')


#: The second driver of a database: the two drivers share everything above
#: the adapter's drivers.py, so ZODB's conformance suites run in full with
#: the first and as a driver-focused subset with the second
#: (``second_driver_repeats``).  Every other test runs with both.
SECOND_DRIVERS = {'postgresql-psycopg', 'mysql-pymysql'}


def second_driver_repeats(item):
    """Whether ``item`` is a conformance test that would only repeat, with
    a database's second driver, what the first driver's run covers: the
    history-free mixins (their SQL differs from the history-preserving
    ones', the driver calls do not: the history-preserving mixins and
    every other module exercise those), ZODB's multi-client race tests
    (MVCC semantics above the adapter) and blobs kept in a shared
    directory (the database never sees their data)."""
    params = getattr(getattr(item, 'callspec', None), 'params', {})
    if params.get('backend') not in SECOND_DRIVERS:
        return False
    module = item.module.__name__
    if module == 'test_conformance':
        return (item.originalname == 'test_history_free'
                or params.get('name', '').startswith('test_race'))
    if module == 'test_blob_conformance':
        return params.get('blob_mode') == 'shared'
    return False


#: The modules that take longest (seconds of test time, measured with
#: --durations), run first: with one process per CPU and a module to a
#: process, a long module left for last runs alone at the end.
LONGEST_FIRST = ('test_conformance', 'test_blobs', 'test_pgbouncer',
                 'test_blob_conformance',
                 'test_zodbconvert', 'test_pack', 'test_processes',
                 'test_storage', 'test_zodbpack', 'test_galera', 'test_cache',
                 'test_migrate', 'test_sync_standby')


def pytest_collection_modifyitems(config, items):
    repeats = [item for item in items if second_driver_repeats(item)]
    if repeats:
        config.hook.pytest_deselected(items=repeats)
        items[:] = [item for item in items if not second_driver_repeats(item)]
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # A stable sort: the tests of a module keep their order.
    items.sort(key=lambda item: rank.get(item.module.__name__,
                                         len(LONGEST_FIRST)))


@pytest.fixture(autouse=True)
def _transaction_manager_as_new():
    """After each test, the thread's transaction manager as new: a test
    that failed with a ZODB connection open leaves it registered as a
    synchronizer (the failure's traceback keeps it alive), and its closed
    storage then failed every later commit of the worker process, a
    cascade of failures in unrelated modules (seen in CI)."""
    yield
    manager = transaction.manager.manager
    manager.clearSynchs()
    try:
        manager.abort()
    except Exception:
        manager.free(manager.get())


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



@pytest.fixture
def config_file(backend, database, keep_history, tmp_path):
    """A file holding the ZConfig text that opens the test's database."""
    path = tmp_path / 'storage.conf'
    path.write_text(backend.zconfig(database, keep_history=keep_history),
                    encoding='utf-8')
    return str(path)


@pytest.fixture
def spawn(tmp_path):
    """Start workers; all are killed and reaped at teardown."""
    started = []

    def spawn_(label, *args):
        worker = Worker(label, args, str(tmp_path))
        started.append(worker)
        return worker

    yield spawn_
    for worker in started:
        worker.close()


@pytest.fixture
def open_db(open_storage):
    """Open ``ZODB.DB`` over storages from ``open_storage``; closed at
    teardown."""
    dbs = []

    def open_(**options):
        db = ZODB.DB(open_storage(**options))
        dbs.append(db)
        return db

    yield open_
    for db in dbs:
        db.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test's tally (tests/tally.py) rides on its teardown report."""
    outcome = yield
    report = outcome.get_result()
    if report.when == 'teardown':
        import tally
        taken = tally.take()
        if taken:
            report.user_properties.append(('tally', taken))


def pytest_terminal_summary(terminalreporter):
    """Print how many of ZODB's conformance tests ran, per backend and
    suite, so that a silent loss of collected mixin methods shows; and what
    the fault, replica and hostile-input tests tried (tests/tally.py)."""
    totals = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, 'user_properties', ()):
                if name == 'tally':
                    for group, what, n in value:
                        totals[group, what] = totals.get((group, what), 0) + n
    if totals:
        terminalreporter.write_sep('-', 'faults, replicas, hostile input')
        groups = {}
        for (group, what), n in sorted(totals.items()):
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
