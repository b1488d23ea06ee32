"""Recently seen object states, shared by the instances of one storage.

A history-free database keeps only the current state of an object, but
conflict resolution needs the state a transaction started from.  This
bounded memory of ``(oid, tid) -> state`` pairs, filled by loads and
commits, lets ``loadSerial`` answer for recent revisions that the database
has already overwritten.  When an entry has been evicted, resolution simply
fails and the caller sees the ConflictError it would otherwise get.
"""
import threading
from collections import OrderedDict


class RecentStates:

    def __init__(self, limit_bytes=8 * 1024 * 1024):
        self._limit = limit_bytes
        self._size = 0
        self._data = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, oid, tid, state):
        if state is None or len(state) > self._limit // 4:
            return
        key = (oid, tid)
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._size -= len(old)
            self._data[key] = state
            self._size += len(state)
            while self._size > self._limit:
                _, evicted = self._data.popitem(last=False)
                self._size -= len(evicted)

    def get(self, oid, tid):
        with self._lock:
            state = self._data.get((oid, tid))
            if state is not None:
                self._data.move_to_end((oid, tid))
            return state

    def clear(self):
        with self._lock:
            self._data.clear()
            self._size = 0
