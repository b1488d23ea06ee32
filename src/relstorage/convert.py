"""Copying one ZODB storage into another, and checking a copy
(``zodbconvert``; callable from Python too).

``copy`` goes through ZODB's restore interface (IStorageRestoreable):
every transaction keeps its id, status, user, description and extension,
and every record its data, including undo records (their back pointer,
``data_txn``) and deletions; blob files are handed over with
``restoreBlob``.  The source is read transaction by transaction (its
``iterator``), so memory holds one transaction at a time.  A history-free
destination is given only the records that are still current in the
source: the others would be overwritten anyway.

``copy`` stops at a transaction boundary when its progress asks
(``ConvertStopped``); what it committed stays, and ``incremental=True``
goes on after the destination's last transaction, once it has checked that
the source holds that transaction and that both agree on it.

``verify`` compares a copy with its source: every transaction and record
(or, for a history-free destination, every current record) and every
blob's bytes, and reports each difference by oid and tid.
"""
import logging
import os
import shutil
import tempfile
import time

from ZODB.blob import is_blob_record
from ZODB.POSException import POSKeyError
from ZODB.utils import p64
from ZODB.utils import u64
from ZODB.utils import z64

from relstorage.errors import ConvertError
from relstorage.errors import ConvertStopped
from relstorage.progress import Progress
from relstorage.tids import tid_time

log = logging.getLogger(__name__)

#: Bytes per read when two blob files are compared.
COMPARE_CHUNK = 1 << 20
#: A destination that can restore in batches (relstorage's
#: begin_restore_batch) commits its database transaction once this many
#: records, bytes or seconds have gone into it, whichever comes first.
BATCH_RECORDS = 20000
BATCH_BYTES = 32 * 1024 * 1024
BATCH_SECONDS = 2.0


def describe_tid(tid):
    """``0x03f2...  (2026-11-24 10:00:00 UTC)`` for a tid (bytes)."""
    when = time.strftime('%Y-%m-%d %H:%M:%S UTC',
                         time.gmtime(tid_time(u64(tid))))
    return f'0x{u64(tid):016x} ({when})'


def _oid(oid):
    return f'0x{u64(oid):x}'


def keeps_history(storage):
    """Whether ``storage`` keeps every revision (FileStorage, a
    history-preserving relstorage) rather than only current ones."""
    supports = getattr(storage, 'supportsUndo', None)
    return bool(supports()) if supports is not None else True


def has_data(storage):
    return storage.lastTransaction() != z64


def _position(txn):
    """Where a source transaction starts, for messages: the file offset of
    a FileStorage's transaction record, if the source has one."""
    pos = getattr(txn, '_tpos', None)
    return '' if pos is None else f' at offset {pos:,} of the source file'


def _close(transactions):
    """Close an iterator of transactions (a FileStorage's holds a file
    open, which its transactions read their records from)."""
    close = getattr(transactions, 'close', None)
    if close is not None:
        close()


class Plan:
    """What a copy is going to do: the destination's last transaction
    (None when empty) and the first tid to copy (None: from the start)."""

    def __init__(self, source, destination, incremental):
        self.source = source
        self.destination = destination
        self.last = None
        self.start = None
        self.current_only = not keeps_history(destination)
        if has_data(destination):
            self.last = destination.lastTransaction()
            if not incremental:
                raise ConvertError(
                    f'the destination already holds transactions (its last '
                    f'is {describe_tid(self.last)}); give --clear to empty '
                    f'it first, or --incremental to copy what follows')
            self._check_common(self.last)
            self.start = p64(u64(self.last) + 1)

    def _check_common(self, tid):
        """Refuse to go on unless the source holds the destination's last
        transaction ``tid`` and both agree on it."""
        transactions = self.source.iterator(start=tid)
        try:
            source_txn = next(iter(transactions), None)
            if source_txn is None or source_txn.tid != tid:
                after = ('has no later transaction' if source_txn is None
                         else f'goes on with {describe_tid(source_txn.tid)}')
                raise ConvertError(
                    f'the destination holds transaction {describe_tid(tid)}'
                    f', which the source lacks (the source {after}): the '
                    f'destination is not a copy of this source')
            differences = self._compare_common(source_txn)
        finally:
            _close(transactions)
        if differences:
            raise ConvertError(
                f'the source and the destination disagree on their last '
                f'common transaction {describe_tid(tid)}: '
                + '; '.join(differences[:3])
                + (f' (and {len(differences) - 3} more)'
                   if len(differences) > 3 else ''))

    def _compare_common(self, source_txn):
        differences = []
        if not keeps_history(self.destination):
            for record in source_txn:
                _compare_current(self.source, self.destination, record,
                                 differences.append)
            return differences
        tid = source_txn.tid
        theirs = self.destination.iterator(start=tid, stop=tid)
        try:
            dest_txn = next(iter(theirs), None)
            if dest_txn is None or dest_txn.tid != tid:
                raise ConvertError(
                    f'the destination does not list its last transaction '
                    f'{describe_tid(tid)} in its iterator')
            _compare_transactions(self.source, self.destination, source_txn,
                                  dest_txn, differences.append)
        finally:
            _close(theirs)
        return differences

    def transactions(self):
        """The source's transactions to copy, counted without reading their
        records (what a dry run reports): ``(count, first, last)``."""
        count, first, last = 0, None, None
        for txn in self.source.iterator(start=self.start):
            count += 1
            first = first or txn.tid
            last = txn.tid
        return count, first, last


class Copier:
    """Copies transactions from ``source`` into ``destination`` (see
    ``copy``)."""

    def __init__(self, source, destination, plan, progress):
        self.source = source
        self.destination = destination
        self.plan = plan
        self.progress = progress
        self.blob_dir = None
        self.size = getattr(source, 'getSize', lambda: None)()
        self.transactions = self.records = self.blobs = 0
        self.bytes = 0
        self.first = self.last = None

    def run(self):
        progress = self.progress
        by_position = isinstance(self.size, int) and self.size > 0 and (
            self.plan.start is None)
        if by_position:
            progress.phase('copying', total=self.size, unit='bytes')
        else:
            progress.phase('copying', unit='transactions')
        pending = None      # a skipped (empty) transaction not committed
        batch = _Batch(self.destination)
        try:
            for txn in self.source.iterator(start=self.plan.start):
                if progress.stop_requested():
                    batch.end()
                    raise ConvertStopped(
                        f'stopped before transaction {describe_tid(txn.tid)}'
                        f'; {self.transactions:,} transactions copied')
                try:
                    copied, nbytes, blobs = self._copy(txn)
                except ConvertError:
                    # The source cannot be read: the transactions before
                    # this one are whole, and kept.
                    batch.end()
                    raise
                batch.added(copied or 0, nbytes)
                if copied is None:
                    pending = txn
                else:
                    pending = None
                    self.transactions += 1
                    self.records += copied
                    self.blobs += blobs
                    self.bytes += nbytes
                    self.first = self.first or txn.tid
                    self.last = txn.tid
                end = getattr(txn, '_tend', None)
                if by_position and end is not None:
                    progress.add(end - progress.done, transactions=1,
                                 records=copied or 0, bytes=nbytes)
                else:
                    progress.add(1, records=copied or 0, bytes=nbytes)
            if pending is not None:
                # The destination's last transaction is the source's last,
                # so that --incremental later starts after it.
                self._commit(pending, [])
                self.transactions += 1
                self.last = pending.tid
            batch.end()
        finally:
            progress.end_phase()
            if self.blob_dir is not None:
                shutil.rmtree(self.blob_dir, ignore_errors=True)
        return self

    def _wanted(self, txn):
        """The records of ``txn`` to copy: all of them, or with a
        history-free destination those still current in the source."""
        records = []
        last = None
        reader = iter(txn)
        try:
            for record in reader:
                last = record.oid
                if self.plan.current_only and not self._current(record):
                    continue
                records.append(record)
        except Exception as e:
            after = f' after oid {_oid(last)}' if last else ''
            raise ConvertError(
                f'cannot read transaction {describe_tid(txn.tid)} of the '
                f'source{_position(txn)}{after}: '
                f'{type(e).__name__}: {e}') from e
        # FileStorage's record iterator stops at a damaged record header
        # with no more than a logged warning: where it stopped short of
        # the transaction's end, the transaction is incomplete.
        pos, end = getattr(reader, '_pos', None), getattr(reader, '_tend', None)
        if isinstance(pos, int) and isinstance(end, int) and pos < end:
            after = f' after oid {_oid(last)}' if last else ''
            raise ConvertError(
                f'transaction {describe_tid(txn.tid)} of the source is '
                f'damaged{_position(txn)}: its record at offset {pos:,}'
                f'{after} cannot be read')
        return records

    def _current(self, record):
        try:
            _, serial = self.source.load(record.oid, '')
        except POSKeyError:
            # Deleted in the source: what it held is copied, and the
            # deletion after it.
            return True
        return serial == record.tid

    def _copy(self, txn):
        """Copy one transaction: ``(records, bytes, blobs)``; records is
        None when a history-free destination needs none of it."""
        records = self._wanted(txn)
        if not records and self.plan.current_only:
            return None, 0, 0
        return self._commit(txn, records)

    def _commit(self, txn, records):
        destination = self.destination
        destination.tpc_begin(txn, txn.tid, txn.status)
        nbytes = blobs = 0
        try:
            for record in records:
                data = record.data
                nbytes += len(data) if data else 0
                blob = self._blob_of(txn, record) if data and is_blob_record(
                    data) else None
                if blob is not None:
                    blobs += 1
                    nbytes += os.path.getsize(blob)
                    destination.restoreBlob(record.oid, record.tid, data,
                                            blob, record.data_txn, txn)
                else:
                    destination.restore(record.oid, record.tid, data, '',
                                        record.data_txn, txn)
            destination.tpc_vote(txn)
            destination.tpc_finish(txn)
        except BaseException:
            destination.tpc_abort(txn)
            raise
        return len(records), nbytes, blobs

    def _blob_of(self, txn, record):
        """A file the destination may take: a link to (or else a copy of)
        the source's blob file of the record, in the destination's
        temporary directory."""
        try:
            path = self.source.loadBlob(record.oid, record.tid)
        except POSKeyError:
            raise ConvertError(
                f'the source has no blob file for oid {_oid(record.oid)} at '
                f'tid {describe_tid(record.tid)}, although its record is a '
                f'blob record{_position(txn)}') from None
        except AttributeError:
            raise ConvertError(
                f'oid {_oid(record.oid)} at tid {describe_tid(record.tid)} '
                f'is a blob record, but the source storage cannot load '
                f'blobs (give it a blob-dir)') from None
        if self.blob_dir is None:
            try:
                parent = self.destination.temporaryDirectory()
            except Exception as e:
                raise ConvertError(
                    f'the source has blobs (oid {_oid(record.oid)} at tid '
                    f'{describe_tid(record.tid)}) but the destination '
                    f'cannot store them: {e}') from None
            self.blob_dir = tempfile.mkdtemp(prefix='convert-', dir=parent)
        target = os.path.join(self.blob_dir,
                              f'{u64(record.oid):x}-{u64(record.tid):x}')
        try:
            # Committed blob files are never written to again, so the
            # destination may share the source's (a link costs no copy of
            # gigabytes); across file systems, a copy.
            os.link(path, target)
        except OSError:
            shutil.copyfile(path, target)
        return target


class _Batch:
    """Restore batches of a destination that has them: a database
    transaction holds several copied transactions, committed by size and
    time (an error rolls back the open batch, which --incremental copies
    again)."""

    def __init__(self, destination):
        self.destination = destination
        begin = getattr(destination, 'begin_restore_batch', None)
        self.on = begin is not None
        if self.on:
            begin()
        self._reset()

    def _reset(self):
        self.records = self.bytes = 0
        self.started = time.monotonic()

    def added(self, records, nbytes):
        if not self.on:
            return
        self.records += records
        self.bytes += nbytes
        if (self.records >= BATCH_RECORDS or self.bytes >= BATCH_BYTES
                or time.monotonic() - self.started >= BATCH_SECONDS):
            self.destination.commit_restore_batch()
            self._reset()

    def end(self):
        if self.on:
            self.on = False
            self.destination.end_restore_batch()


def copy(source, destination, incremental=False, progress=None):
    """Copy the transactions of ``source`` into ``destination`` (both open
    ZODB storages; the destination must implement restore).

    Raises ConvertError (nothing copied) when the destination already holds
    data and ``incremental`` is false, or when it is not a prefix of the
    source; ConvertError when a source record cannot be read (the
    transaction it is in is not copied); ConvertStopped when ``progress``
    asks to stop.  Returns a summary with ``transactions``, ``records``,
    ``blobs``, ``bytes``, ``first`` and ``last`` (tids, or None)."""
    progress = progress or Progress('convert')
    plan = Plan(source, destination, incremental)
    if plan.start is not None:
        progress.note('the destination holds transactions up to %s; '
                      'copying what follows', describe_tid(plan.last))
    if plan.current_only:
        progress.note('the destination is history-free: copying the '
                      'records that are current in the source')
    return Copier(source, destination, plan, progress).run()


# -- verification ------------------------------------------------------------

def _blob_file(storage, oid, tid):
    try:
        return storage.loadBlob(oid, tid)
    except (POSKeyError, AttributeError):
        return None


def _same_file(a, b):
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, 'rb') as fa, open(b, 'rb') as fb:
        while True:
            chunk = fa.read(COMPARE_CHUNK)
            if chunk != fb.read(COMPARE_CHUNK):
                return False
            if not chunk:
                return True


def _compare_blobs(source, destination, oid, tid, report):
    """Report a blob of revision ``(oid, tid)`` that differs; True if
    there was one to compare."""
    source_file = _blob_file(source, oid, tid)
    dest_file = _blob_file(destination, oid, tid)
    where = f'oid {_oid(oid)} tid {describe_tid(tid)}'
    if source_file is None and dest_file is None:
        return False
    if dest_file is None:
        report(f'{where}: the blob is missing in the destination')
    elif source_file is None:
        report(f'{where}: the blob is missing in the source')
    elif not _same_file(source_file, dest_file):
        report(f'{where}: the blobs differ')
    return True


def _resolved(storage, record):
    """The state a record stands for (an undo record points at older
    data)."""
    if record.data is None and record.data_txn:
        try:
            return storage.loadSerial(record.oid, record.data_txn)
        except POSKeyError:
            return None
    return record.data


def _compare_transactions(source, destination, s_txn, d_txn, report):
    """Report how two copies of one transaction differ; returns the number
    of records and blobs compared."""
    tid = describe_tid(s_txn.tid)
    for name in ('user', 'description', 'extension'):
        if getattr(s_txn, name) != getattr(d_txn, name):
            report(f'transaction {tid}: the {name} differs '
                   f'({getattr(s_txn, name)!r} in the source, '
                   f'{getattr(d_txn, name)!r} in the destination)')
    theirs = {}
    for record in d_txn:
        theirs[record.oid] = record
    records = blobs = 0
    for record in s_txn:
        records += 1
        other = theirs.pop(record.oid, None)
        where = f'oid {_oid(record.oid)} tid {tid}'
        if other is None:
            report(f'{where}: the record is missing in the destination')
            continue
        data = _resolved(source, record)
        if data != _resolved(destination, other):
            report(f'{where}: the records differ')
        elif data and is_blob_record(data):
            blobs += _compare_blobs(source, destination, record.oid,
                                    record.tid, report)
    for oid in sorted(theirs):
        report(f'oid {_oid(oid)} tid {tid}: the record is only in the '
               f'destination')
    return records, blobs


def _compare_current(source, destination, record, report):
    """History-free destination: when ``record`` is the source's current
    revision of its object (or its deletion), report how the destination's
    current revision differs.  Returns ``(compared, present, blobs)``:
    whether it was compared, whether the destination has the object, and
    how many blobs were compared."""
    oid = record.oid
    try:
        data, serial = source.load(oid, '')
    except POSKeyError:
        data = serial = None
    if serial is not None and serial != record.tid:
        return 0, 0, 0      # not current: a history-free copy lacks it
    if serial is None and record.data is not None:
        return 0, 0, 0      # deleted later: checked at the deletion
    where = f'oid {_oid(oid)} tid {describe_tid(record.tid)}'
    try:
        their_data, their_serial = destination.load(oid, '')
    except POSKeyError:
        their_data = their_serial = None
    present = int(their_serial is not None)
    if serial is None:
        if present:
            report(f'{where}: deleted in the source, present in the '
                   f'destination')
        return 1, present, 0
    if not present:
        report(f'{where}: the object is missing in the destination')
    elif their_serial != serial:
        report(f'{where}: the destination\'s current revision is '
               f'{describe_tid(their_serial)}')
    elif their_data != data:
        report(f'{where}: the records differ')
    elif data and is_blob_record(data):
        return 1, 1, _compare_blobs(source, destination, oid, serial, report)
    return 1, present, 0


class Verification:
    """The outcome of ``verify``: counts and the number of differences."""

    def __init__(self):
        self.transactions = self.records = self.blobs = 0
        self.differences = 0


def verify(source, destination, report, progress=None):
    """Compare ``destination`` with ``source``, its copy's origin: every
    transaction (metadata and records) when the destination keeps history,
    else every record current in the source; blobs byte by byte.  Calls
    ``report(message)`` once per difference (naming oid and tid).  Returns
    a Verification; ConvertStopped when ``progress`` asks to stop."""
    progress = progress or Progress('convert')
    outcome = Verification()

    def found(message):
        outcome.differences += 1
        report(message)

    progress.phase('verifying', unit='transactions')
    try:
        if keeps_history(destination):
            _verify_history(source, destination, found, progress, outcome)
        else:
            _verify_current(source, destination, found, progress, outcome)
    finally:
        progress.end_phase()
    return outcome


def _stop_if_asked(progress, outcome):
    if progress.stop_requested():
        raise ConvertStopped(f'verification stopped after '
                             f'{outcome.transactions:,} transactions')


def _verify_history(source, destination, found, progress, outcome):
    theirs = iter(destination.iterator())
    other = next(theirs, None)
    for txn in source.iterator():
        _stop_if_asked(progress, outcome)
        while other is not None and other.tid < txn.tid:
            found(f'transaction {describe_tid(other.tid)} is only in the '
                  f'destination')
            other = next(theirs, None)
        outcome.transactions += 1
        if other is None or other.tid != txn.tid:
            found(f'transaction {describe_tid(txn.tid)} is missing in the '
                  f'destination')
            progress.add(1)
            continue
        records, blobs = _compare_transactions(source, destination, txn,
                                               other, found)
        outcome.records += records
        outcome.blobs += blobs
        progress.add(1, records=records)
        other = next(theirs, None)
    while other is not None:
        found(f'transaction {describe_tid(other.tid)} is only in the '
              f'destination')
        other = next(theirs, None)


def _verify_current(source, destination, found, progress, outcome):
    present = 0
    for txn in source.iterator():
        _stop_if_asked(progress, outcome)
        outcome.transactions += 1
        records = 0
        for record in txn:
            compared, there, blobs = _compare_current(
                source, destination, record, found)
            records += compared
            present += there
            outcome.blobs += blobs
        outcome.records += records
        progress.add(1, records=records)
    # The destination's other objects, which the source does not have.
    count = len(destination)
    if count > present:
        progress.note('the destination has %d objects, %d of them seen: '
                      'looking for the others', count, present)
        for oid in _current_oids(destination):
            try:
                source.load(oid, '')
            except POSKeyError:
                if _created(source, oid):
                    continue    # deleted in the source: reported above
                found(f'oid {_oid(oid)} is only in the destination')


def _created(source, oid):
    """Whether ``oid`` ever existed in the source (history of a deleted
    object), where the source can tell."""
    history = getattr(source, 'history', None)
    if history is None:
        return False
    try:
        return bool(history(oid, size=1))
    except (POSKeyError, KeyError):
        return False


def _current_oids(storage):
    """Every oid with a current revision in ``storage`` (record_iternext,
    which FileStorage and relstorage have)."""
    next_oid = None
    while True:
        oid, _, _, next_oid = storage.record_iternext(next_oid)
        yield oid
        if next_oid is None:
            return
