"""ZODB's own storage test mixins, composed per history mode.

The mixins are unittest classes; ``run()`` drives one of their test methods
against a storage that a backend opens, so that pytest's fixtures choose the
database and each mixin method appears as one pytest test.  Nothing in the
mixins is changed or filtered.
"""
import functools
import unittest

import ZODB
import ZODB.FileStorage
from ZODB.tests import BasicStorage
from ZODB.tests import ConflictResolution
from ZODB.tests import HistoryStorage
from ZODB.tests import IteratorStorage
from ZODB.tests import MTStorage
from ZODB.tests import PackableStorage
from ZODB.tests import PersistentStorage
from ZODB.tests import ReadOnlyStorage
from ZODB.tests import RecoveryStorage
from ZODB.tests import RevisionStorage
from ZODB.tests import StorageTestBase
from ZODB.tests import Synchronization
from ZODB.tests import TransactionalUndoStorage
from ZODB.tests import testZODB


class _RelStorageCase:
    """Opens the storage under test through ``self.backend``."""

    __test__ = False
    backend = None
    database = None
    keep_history = None

    def open(self, **options):
        self._storage = self.backend.open(
            self.database, keep_history=self.keep_history, **options)

    def setUp(self):
        StorageTestBase.StorageTestBase.setUp(self)
        self.open()

    def _new_storage_client(self):
        # Another client of the same database, as a second process would
        # open it (used by ZODB's race tests).
        return self.backend.open(self.database, keep_history=self.keep_history)


class HistoryFreeCase(
        _RelStorageCase,
        StorageTestBase.StorageTestBase,
        BasicStorage.BasicStorage,
        Synchronization.SynchronizedStorage,
        ConflictResolution.ConflictResolvingStorage,
        PersistentStorage.PersistentStorage,
        MTStorage.MTStorage,
        ReadOnlyStorage.ReadOnlyStorage,
        PackableStorage.PackableStorageWithOptionalGC):
    keep_history = False


class HistoryPreservingCase(
        _RelStorageCase,
        StorageTestBase.StorageTestBase,
        BasicStorage.BasicStorage,
        Synchronization.SynchronizedStorage,
        ConflictResolution.ConflictResolvingStorage,
        ConflictResolution.ConflictResolvingTransUndoStorage,
        PersistentStorage.PersistentStorage,
        MTStorage.MTStorage,
        ReadOnlyStorage.ReadOnlyStorage,
        TransactionalUndoStorage.TransactionalUndoStorage,
        RevisionStorage.RevisionStorage,
        HistoryStorage.HistoryStorage,
        IteratorStorage.IteratorStorage,
        IteratorStorage.ExtendedIteratorStorage,
        PackableStorage.PackableStorageWithOptionalGC,
        PackableStorage.PackableUndoStorage):
    keep_history = True
    # We store the extension bytes given at commit and return them as they
    # were, like FileStorage.
    use_extension_bytes = True


class _RecoveryCase(
        StorageTestBase.StorageTestBase,
        RecoveryStorage.RecoveryStorage):
    """copyTransactionsFrom between two storages; subclasses choose which
    side is ours."""

    __test__ = False
    backend = None
    database = None
    keep_history = True

    def _ours(self):
        return self.backend.open(
            self.backend.new_database(), keep_history=True)

    def tearDown(self):
        self._dst.close()
        StorageTestBase.StorageTestBase.tearDown(self)


class RecoveryOursToOursCase(_RecoveryCase):
    def setUp(self):
        StorageTestBase.StorageTestBase.setUp(self)
        self._storage = self._ours()
        self._dst = self._ours()


class RecoveryFileStorageToOursCase(_RecoveryCase):
    def setUp(self):
        StorageTestBase.StorageTestBase.setUp(self)
        self._storage = ZODB.FileStorage.FileStorage('Source.fs', create=True)
        self._dst = self._ours()


class RecoveryOursToFileStorageCase(_RecoveryCase):
    def setUp(self):
        StorageTestBase.StorageTestBase.setUp(self)
        self._storage = self._ours()
        self._dst = ZODB.FileStorage.FileStorage('Dest.fs', create=True)


class _ZODBCase(testZODB.ZODBTests):
    """ZODB's database-level tests, on our storage instead of FileStorage."""

    __test__ = False
    backend = None
    database = None
    keep_history = None

    def setUp(self):
        ZODB.tests.util.TestCase.setUp(self)
        self._storage = self.backend.open(
            self.database, keep_history=self.keep_history)
        self._db = ZODB.DB(self._storage)


class ZODBHistoryFreeCase(_ZODBCase):
    keep_history = False

    def testMultipleUndoInOneTransaction(self):
        self.skipTest('undo needs history: a history-free storage has '
                      'supportsUndo() false and no undo log')


class ZODBHistoryPreservingCase(_ZODBCase):
    keep_history = True


def test_names(case):
    """Every test method a case inherits.  ZODB 6 names them ``test*``;
    older ZODBs used ``check*``, which we collect only if there is no
    ``test*`` at all (some ``check*`` are helpers in ZODB 6)."""
    names = unittest.TestLoader().getTestCaseNames(case)
    if not names:
        loader = unittest.TestLoader()
        loader.testMethodPrefix = 'check'
        names = loader.getTestCaseNames(case)
    return list(names)


def _tids_follow_time_time(case):
    """False if a storage of the case has tids from a server's clock.
    (Compare with None: an empty storage is falsy, it has a __len__.)"""
    for attr in ('_storage', '_dst'):
        adapter = getattr(getattr(case, attr, None), '_adapter', None)
        if adapter is not None and \
                not adapter.capabilities.tids_from_local_clock:
            return False
    return True


def run(case_class, name, backend):
    """Run one mixin method on a fresh database of ``backend``."""
    case = case_class(name)
    case.backend = backend
    case.database = backend.new_database()
    case.setUp()
    method = getattr(case, name)
    if not _tids_follow_time_time(case):
        # ZODB's time_monotonically_increases fakes time.time() in this
        # process, running ahead of the real clock; a database server
        # chooses tids from its own, real clock, so a pack time taken from
        # the fake clock would not fall between the tids the test means.
        # Run such a test body on the real clock instead (the decorator
        # keeps it as __wrapped__); nothing else about it changes.
        if hasattr(method, '__wrapped__'):
            method = functools.partial(method.__wrapped__, case)
    try:
        method()
    finally:
        try:
            case.tearDown()
        finally:
            case.doCleanups()
