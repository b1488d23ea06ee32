"""Transaction ids: 8-byte ZODB TimeStamps, handled as ints in SQL."""
import struct
import time

from persistent.timestamp import TimeStamp
from ZODB.utils import p64
from ZODB.utils import u64

#: The largest id a signed 64-bit database column holds.
MAX_ID = 2 ** 63 - 1


def tid_for_time(seconds):
    """The int tid of a moment given in seconds since the epoch."""
    parts = time.gmtime(seconds)
    stamp = TimeStamp(*(parts[:5] + (parts[5] + seconds % 1,)))
    return u64(stamp.raw())


def choose_tid(now, last_tid):
    """A tid close to ``now`` and strictly greater than ``last_tid``."""
    return max(tid_for_time(now), last_tid + 1)


def tid_time(tid):
    """Seconds since the epoch of an 8-byte or int tid."""
    if isinstance(tid, int):
        tid = p64(tid)
    return TimeStamp(tid).timeTime()


def tid_text(tid):
    """``2026-11-24 10:00:00 UTC``: when an 8-byte or int tid was."""
    return time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(tid_time(tid)))


_unpack_id = struct.Struct('>Q').unpack


def id_to_int(value, what, oid=None):
    """Convert an 8-byte oid or tid to an int, raising ValueError that
    names ``what`` (``what`` of ``oid``, when given) for anything else or
    for ids a database cannot hold.  Called for every load and store: the
    common case is checked first and no message is formatted for it."""
    if type(value) is bytes and len(value) == 8 and value[0] < 0x80:
        return _unpack_id(value)[0]
    if isinstance(value, str) and len(value) == 8 and max(value) < '\x80':
        # Callers written for Python 2 (ZODB's blob_transaction.txt among
        # them) still pass ids as str: same bytes.
        return id_to_int(value.encode('latin-1'), what, oid)
    if oid is not None:
        what = f'{what} of oid {oid!r}'
    if not isinstance(value, bytes) or len(value) != 8:
        raise ValueError(f'{what} must be 8 bytes, not {value!r}')
    number = u64(value)
    if number > MAX_ID:
        raise ValueError(
            f'{what} {value!r} is larger than a database can store '
            f'(at most 0x{MAX_ID:x})')
    return number
