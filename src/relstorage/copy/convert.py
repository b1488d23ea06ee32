"""Copying one ZODB storage into another (``zodbconvert``; callable from
Python too).

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

``relstorage.copy.verify`` checks a copy against its source.
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

from relstorage.copy.compare import _compare_current
from relstorage.copy.compare import _compare_transactions
from relstorage.copy.compare import _oid
from relstorage.copy.compare import describe_tid
from relstorage.errors import ConvertError
from relstorage.errors import ConvertStopped
from relstorage.progress import Progress

log = logging.getLogger(__name__)

#: A destination that can restore in batches (relstorage's
#: begin_restore_batch) commits its database transaction once this many
#: records, bytes or seconds have gone into it, whichever comes first.
BATCH_RECORDS = 20000
BATCH_BYTES = 32 * 1024 * 1024
BATCH_SECONDS = 2.0
#: Into a destination whose commits may restore several source
#: transactions with their own tids (a history-free relstorage), the
#: current records of consecutive source transactions go in one commit of
#: up to this many records or bytes: the commit's fixed cost (locks, the
#: last-tid marker, a few statements) is paid once for them all instead of
#: once per source transaction, most of which hold a handful of records.
GROUP_RECORDS = 2000
GROUP_BYTES = 8 * 1024 * 1024




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
        # A FileStorage's index gives the position of each object's current
        # record, which its iterator's records carry: the current check
        # costs no read of the source (a load each cost a third of a small
        # history-free conversion).
        self._index = getattr(source, '_index', None)
        if not hasattr(self._index, 'get'):
            self._index = None

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
        group = _Group(self, batch) if (
            self.plan.current_only
            and getattr(self.destination, 'restores_own_tids', False)) else None
        try:
            for txn in self.source.iterator(start=self.plan.start):
                if progress.stop_requested():
                    self._end_whole(group, batch)
                    raise ConvertStopped(
                        f'stopped before transaction {describe_tid(txn.tid)}'
                        f'; {self.transactions:,} transactions copied')
                try:
                    if group is not None:
                        copied, nbytes, blobs = group.add(txn)
                    else:
                        copied, nbytes, blobs = self._copy(txn)
                        batch.added(copied or 0, nbytes)
                except ConvertError:
                    # The source cannot be read: the transactions before
                    # this one are whole, and kept.
                    self._end_whole(group, batch)
                    raise
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
            if group is not None and group.commit() and pending is not None:
                # The group's commit took the last transaction's tid.
                self.transactions += 1
                self.last = pending.tid
            elif pending is not None:
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

    @staticmethod
    def _end_whole(group, batch):
        """Commit what is copied of whole transactions (the group's and
        the batch's) before stopping early."""
        if group is not None:
            group.commit()
        batch.end()

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
        position = getattr(record, 'pos', None)
        if self._index is not None and position is not None:
            # A deleted object's current record is its deletion, copied
            # (to a destination that never had its state: nothing to do).
            return self._index.get(record.oid) == position
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


class _Group:
    """The current records of consecutive source transactions, restored
    in one commit of the destination (see ``GROUP_RECORDS``): under the
    tid of the last transaction seen, each record with its own.  A
    transaction with a blob is committed by itself (the destination files
    a blob under its commit's tid)."""

    def __init__(self, copier, batch):
        self.copier = copier
        self.batch = batch
        self.records = []
        self.bytes = 0
        self.last = None        # the last source transaction seen

    def add(self, txn):
        """Take ``txn``'s current records: ``(records, bytes, 0)``, or
        ``(None, 0, 0)`` when it has none; a transaction with a blob is
        committed at once (``(records, bytes, blobs)``)."""
        records = self.copier._wanted(txn)
        if any(record.data and is_blob_record(record.data)
               for record in records):
            self.commit()
            copied, nbytes, blobs = self.copier._commit(txn, records)
            self.batch.added(copied, nbytes)
            return copied, nbytes, blobs
        self.last = txn
        if not records:
            return None, 0, 0
        nbytes = sum(len(record.data) for record in records if record.data)
        self.records += records
        self.bytes += nbytes
        if (len(self.records) >= GROUP_RECORDS
                or self.bytes >= GROUP_BYTES):
            self.commit()
        return len(records), nbytes, 0

    def commit(self):
        """Commit what the group holds, as of its last transaction; true
        if there was anything to commit."""
        if self.last is None:
            return False
        self.copier._commit(self.last, self.records)
        self.batch.added(len(self.records), self.bytes)
        self.records = []
        self.bytes = 0
        self.last = None
        return True


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
