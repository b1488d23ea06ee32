"""Transactional undo for history-preserving storages.

Undoing transaction T writes, for every object T changed, the state the
object had before T.  When the object has changed since T (in the database
or earlier in this same undo transaction), ZODB's conflict resolution merges
"undo T's change" into the newer state; if it cannot, UndoError.  An undo
that copies an older revision unchanged records that revision's tid as the
new record's ``data_txn``, which the iterator reports as a back-pointer,
and, for a blob, copies that revision's blob.
"""
from ZODB.blob import is_blob_record
from ZODB.POSException import ConflictError
from ZODB.POSException import UndoError
from ZODB.utils import p64

from relstorage.tids import id_to_int


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
