"""ZODB's own blob tests, run unchanged against our storage.

ZODB builds them as unittest suites around a factory ``(name, blob_dir) ->
storage`` (``ZODB.tests.testblob.storage_reusable_suite`` and
``PackableStorage.IExternalGC_suite``).  Here the suites are built once with
a factory that opens the database of the test that runs (a ``Context``),
flattened into their single cases (each doctest file or function, each
test method), and each case is one pytest test per backend, history mode
and blob mode.
"""
import doctest
import os
import unittest

import ZODB.tests.util
from ZODB.tests import PackableStorage
from ZODB.tests import testblob


class Context:
    """What the suites' factory opens: databases of ``backend`` (one per
    name a test asks for), with the given history and blob mode."""

    current = None

    def __init__(self, backend, keep_history, shared):
        self.backend = backend
        self.keep_history = keep_history
        self.shared = shared
        self.databases = {}
        self.opened = []
        self.tids_follow_time = (
            backend.capabilities().tids_from_local_clock)

    def open(self, name, blob_dir, **options):
        database = self.databases.get(name)
        if database is None:
            database = self.databases[name] = self.backend.new_database()
        storage = self.backend.open(
            database, keep_history=self.keep_history, blob_dir=blob_dir,
            shared_blob_dir=self.shared, **options)
        self.opened.append(storage)
        return storage

    def close(self):
        for storage in self.opened:
            storage.close()


def _factory(name='data', blob_dir=None, **options):
    if blob_dir is None:
        blob_dir = f'{name}.bobs'
    return Context.current.open(name, blob_dir, **options)


def _no_gc_factory():
    # IExternalGC.test expects a storage that does not collect garbage
    # when it packs (its objects go only by deleteObject).
    return _factory(pack_gc=False)


def _flatten(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from _flatten(test)
        else:
            yield test


#: Examples that only a user other than root can pass.
_NEEDS_NON_ROOT = (
    # blob_transaction.txt: opening a committed (read-only) blob file for
    # writing raises PermissionError, except for root, who may write any
    # file (the test machines run as root).  test_blob_file_permissions
    # still checks that the file has no write permission.
    "open(blob.committed(), 'w')",
)


def _skip_root_only_failures(case):
    """Mark the examples of ``case`` that cannot pass as root as skipped
    (only those; the rest of the doctest runs)."""
    if not hasattr(os, 'geteuid') or os.geteuid() != 0:
        return
    test = getattr(case, '_dt_test', None)
    if test is None:
        return
    for example in test.examples:
        if any(text in example.source for text in _NEEDS_NON_ROOT):
            example.options[doctest.SKIP] = True


def _blob_basic_suite():
    """ZODB's blob_basic.txt: the Blob class, which needs no storage."""
    return doctest.DocFileSuite(
        'blob_basic.txt', package='ZODB.tests',
        setUp=testblob.setUp, tearDown=ZODB.tests.util.tearDown,
        optionflags=doctest.ELLIPSIS, checker=ZODB.tests.util.checker)


def cases(keep_history):
    """``{test id: case}`` of ZODB's blob tests for a history mode.  Undo,
    packing of undone revisions and the recovery test need history."""
    suite = unittest.TestSuite([
        _blob_basic_suite(),
        testblob.storage_reusable_suite(
            'RelStorage', lambda name, blob_dir: _factory(name, blob_dir),
            test_blob_storage_recovery=keep_history,
            test_packing=keep_history,
            test_undo=keep_history),
        PackableStorage.IExternalGC_suite(_no_gc_factory),
    ])
    found = {}
    for case in _flatten(suite):
        _skip_root_only_failures(case)
        name = case.id().rsplit('/', 1)[-1]
        name = name.replace('ZODB.tests.', '')
        assert name not in found, name
        found[name] = case
    return found


def run(case, context):
    """Run one case with ``context`` as what the factory opens; return the
    unittest result."""
    result = unittest.TestResult()
    layer = None
    if context.tids_follow_time:
        # ZODB wraps these suites in a layer that makes time.time() run
        # ahead of the real clock.  Only a database whose tids come from
        # this process's clock can follow it; on a server, pack times from
        # the fake clock would not fall between the tids the test means, so
        # there the cases run on the real clock (testblob's new_time()
        # then sleeps instead of advancing the fake one).
        layer = ZODB.tests.util.MonotonicallyIncreasingTimeMinimalTestLayer(
            'RelStorage')
        layer.testSetUp()
    Context.current = context
    try:
        case.run(result)
    finally:
        Context.current = None
        if layer is not None:
            layer.testTearDown()
        context.close()
    return result
