"""ZODB's own storage test mixins, composed per history mode.

The mixins are unittest classes; ``run()`` drives one of their test methods
against a storage that a backend opens, so that pytest's fixtures choose the
database and each mixin method appears as one pytest test.  Nothing in the
mixins is changed or filtered, with one exception: four of PackableStorage's
tests read every revision of an object with loadSerial before they pack,
which only a storage that keeps history can answer (history-free,
loadSerial of a replaced revision is a POSKeyError, as in RelStorage 4,
whose suite replaces them too).  ``HistoryFreePackTests`` gives the
history-free case its own versions: the same commits and packs, the same
checks after the pack, and before it the revisions a history-free storage
has.
"""
import functools
import time
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
from ZODB.serialize import referencesf
from ZODB.tests.PackableStorage import ZERO
from ZODB.tests.PackableStorage import Root
from ZODB.tests.PackableStorage import dumps
from ZODB.tests.PackableStorage import pdumps
from ZODB.utils import load_current


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


class HistoryFreePackTests:
    """History-free versions of the PackableStorage tests that read replaced
    revisions (see the module docstring)."""

    def _three_revisions(self, obj):
        """Store values 1, 2 and 3 of ``obj``; before any pack only the last
        revision can be read."""
        oid = obj.getoid()
        revids = []
        for value in (1, 2, 3):
            obj.value = value
            revids.append(self._dostoreNP(
                oid, revid=revids[-1] if revids else None,
                data=pdumps(obj)))
        self._only_current(oid, revids, 3)
        return revids

    def _only_current(self, oid, revids, value):
        for revid in revids[:-1]:
            self.assertRaises(KeyError, self._storage.loadSerial, oid, revid)
        data = self._storage.loadSerial(oid, revids[-1])
        self.assertEqual(self._makeloader()(data).value, value)
        data, revid = load_current(self._storage, oid)
        self.assertEqual(revid, revids[-1])

    def _pack_now(self, **kw):
        now = packtime = time.time()
        while packtime <= now:
            packtime = time.time()
        self._storage.pack(packtime, referencesf, **kw)

    def _stored_root(self, **objects):
        root = Root()
        for name, obj in objects.items():
            setattr(root, name, obj)
        root.value = 0
        return self._dostoreNP(ZERO, data=dumps(root))

    def testPackAllRevisions(self):
        self._initroot()
        obj = self._newobj()
        revids = self._three_revisions(obj)
        self._pack_now()
        # Nothing refers to the object: all of it is gone.
        for revid in revids:
            self.assertRaises(KeyError, self._storage.loadSerial,
                              obj.getoid(), revid)
        self.assertRaises(KeyError, load_current, self._storage,
                          obj.getoid())

    def testPackAllRevisionsNoGC(self):
        self._initroot()
        obj = self._newobj()
        revids = self._three_revisions(obj)
        self._pack_now(gc=False)
        self._only_current(obj.getoid(), revids, 3)

    def testPackJustOldRevisions(self):
        obj = self._newobj()
        revid0 = self._stored_root(obj=obj)
        revids = self._three_revisions(obj)
        self._pack_now()
        self.assertEqual(load_current(self._storage, ZERO)[1], revid0)
        self._only_current(obj.getoid(), revids, 3)

    def testPackOnlyOneObject(self):
        obj1, obj2 = self._newobj(), self._newobj()
        revid0 = self._stored_root(obj1=obj1, obj2=obj2)
        revids = self._three_revisions(obj1)
        obj2.value = 11
        revid4 = self._dostoreNP(obj2.getoid(), data=pdumps(obj2))
        self._only_current(obj2.getoid(), [revid4], 11)
        self._pack_now()
        self.assertEqual(load_current(self._storage, ZERO)[1], revid0)
        self._only_current(obj1.getoid(), revids, 3)
        self._only_current(obj2.getoid(), [revid4], 11)


class HistoryFreeCase(
        _RelStorageCase,
        HistoryFreePackTests,
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
