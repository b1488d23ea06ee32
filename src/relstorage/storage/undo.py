"""Transactional undo for history-preserving storages.

Undoing transaction T writes, for every object T changed, the state the
object had before T.  When the object has changed since T (in the database
or earlier in this same undo transaction), ZODB's conflict resolution merges
"undo T's change" into the newer state; if it cannot, UndoError.  An undo
that copies an older revision unchanged records that revision's tid as the
new record's ``data_txn``, which the iterator reports as a back-pointer,
and, for a blob, copies that revision's blob.
"""
import logging

from ZODB._compat import loads
from ZODB.blob import is_blob_record
from ZODB.POSException import ConflictError
from ZODB.POSException import UndoError
from ZODB.utils import p64

from relstorage.tids import id_to_int
from relstorage.tids import tid_time

log = logging.getLogger(__name__)


def undo(storage, txn, transaction_id):
    """Stage the undo of ``transaction_id`` in the PendingTransaction
    ``txn`` (reading the latest committed data through its cursor); returns
    ``(None, oids)`` as IStorageUndoable.undo may.  ``storage`` resolves
    conflicts."""
    adapter, cursor = txn.adapter, txn.cursor
    try:
        tid = id_to_int(transaction_id, 'undo transaction id')
    except ValueError as e:
        raise UndoError(str(e)) from None
    mover = adapter.mover
    records = adapter.history.undoable_records(cursor, tid)
    if not records:
        raise UndoError(
            f'transaction {transaction_id!r} cannot be undone: it is '
            f'unknown, was packed, or changed no object')
    oids = []
    for oid, current_tid, before_tid in records:
        undone_state = mover.load_revision(cursor, oid, tid)
        before_state = (None if before_tid is None
                        else mover.load_revision(cursor, oid, before_tid))
        pending = txn.pending(oid)
        if pending is not None:
            prev_tid, newer_state = pending
        else:
            prev_tid = current_tid
            newer_state = (undone_state if current_tid == tid
                           else mover.load_revision(cursor, oid, current_tid))
        if newer_state == undone_state:
            # Unchanged since T (or changed back): copy the older revision.
            txn.add(oid, prev_tid, before_state, before_tid or 0)
            if txn.blob_support is not None and is_blob_record(before_state):
                txn.pending_blobs().copy(oid, before_tid)
        else:
            if before_state is None or newer_state is None:
                raise UndoError(
                    'the object was created or deleted by the undone '
                    'transaction and has changed since', p64(oid))
            try:
                merged = storage.tryToResolveConflict(
                    p64(oid), p64(current_tid), p64(tid), before_state,
                    newer_state)
            except ConflictError:
                raise UndoError(
                    'some data were modified by a later transaction',
                    p64(oid)) from None
            txn.add(oid, prev_tid, merged)
        oids.append(p64(oid))
    return None, oids


def transaction_info(tid, user, description, extension):
    """The dict undoLog() and history() give for one transaction."""
    info = {
        'id': p64(tid),
        'time': tid_time(tid),
        'user_name': user or b'',
        'description': description or b'',
    }
    if extension:
        try:
            info.update(loads(extension))
        except Exception:  # a damaged extension must not hide the rest
            log.warning('cannot unpickle the extension of transaction %r',
                        p64(tid), exc_info=True)
    return info


class UndoMethods:
    """undoLog and undoInfo of RelStorage (a mix-in)."""

    def undoLog(self, first=0, last=-20, filter=None):  # noqa: A002 (IStorageUndoable's signature)
        if last < 0:
            last = first - last
        wanted = last - first
        if wanted <= 0 or not self._options.keep_history:
            return []
        result = []
        skipped = 0
        offset = 0
        page = max(wanted + first, 50) if filter is None else 100
        while len(result) < wanted:
            with self._lock:
                rows = self._read_latest(
                    'undoLog', lambda cursor: self._adapter.history.undo_log(
                        cursor, offset, page))  # noqa: B023 (run at once)
            if not rows:
                break
            offset += len(rows)
            for row in rows:
                info = transaction_info(*row)
                if filter is not None and not filter(info):
                    continue
                if skipped < first:
                    skipped += 1
                    continue
                result.append(info)
                if len(result) == wanted:
                    break
        return result

    def undoInfo(self, first=0, last=-20, specification=None):
        if not specification:
            return self.undoLog(first, last)
        spec = tuple(specification.items())
        return self.undoLog(
            first, last, lambda info: all(info.get(k) == v for k, v in spec))
