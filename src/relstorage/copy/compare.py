"""Comparing a record (or a transaction) of two storages, blobs
included: what ``verify`` reports and what an incremental ``copy`` checks
before it goes on."""
import os
import time

from ZODB.blob import is_blob_record
from ZODB.POSException import POSKeyError
from ZODB.utils import u64

from relstorage.tids import tid_time


def describe_tid(tid):
    """``0x03f2...  (2026-11-24 10:00:00 UTC)`` for a tid (bytes)."""
    when = time.strftime('%Y-%m-%d %H:%M:%S UTC',
                         time.gmtime(tid_time(u64(tid))))
    return f'0x{u64(tid):016x} ({when})'


def _oid(oid):
    return f'0x{u64(oid):x}'


#: Bytes per read when two blob files are compared.
COMPARE_CHUNK = 1 << 20


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


