"""Transaction ids: 8-byte ZODB TimeStamps, handled as ints in SQL."""
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


def id_to_int(value, what):
    """Convert an 8-byte oid or tid to an int, raising ValueError that
    names ``what`` for anything else or for ids a database cannot hold."""
    if not isinstance(value, bytes) or len(value) != 8:
        raise ValueError(f'{what} must be 8 bytes, not {value!r}')
    number = u64(value)
    if number > MAX_ID:
        raise ValueError(
            f'{what} {value!r} is larger than a database can store '
            f'(at most 0x{MAX_ID:x})')
    return number
