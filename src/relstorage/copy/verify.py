"""Checking a copy against its source (``zodbconvert --verify``).

``verify`` compares a copy with its source: every transaction and record
(or, for a history-free destination, every current record) and every
blob's bytes, and reports each difference by oid and tid.
"""
from ZODB.POSException import POSKeyError

from relstorage.copy.compare import _compare_current
from relstorage.copy.compare import _compare_transactions
from relstorage.copy.compare import _oid
from relstorage.copy.compare import describe_tid
from relstorage.copy.convert import keeps_history
from relstorage.errors import ConvertStopped
from relstorage.progress import Progress


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
