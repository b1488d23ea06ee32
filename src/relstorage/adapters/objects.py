"""Shared default of the object mover role (see interfaces.IObjectMover).

A database's subclass supplies the SQL as class constants (with its own
parameter style) and overrides a method only where the database needs a
different shape, such as bulk upload.
"""
from relstorage.adapters.interfaces import IObjectMover
from zope.interface import implementer


def batched(items, size):
    """Yield successive lists of at most ``size`` items."""
    items = list(items)
    for start in range(0, len(items), size):
        yield items[start:start + size]


@implementer(IObjectMover)
class ObjectMover:

    #: The bind-parameter placeholder of the driver (``?`` or ``%s``).
    PARAM = '?'
    #: How many values one ``IN (...)`` list may carry.
    IN_BATCH = 500

    LOAD_CURRENT = None          # (oid) -> state, tid
    LOAD_CURRENTS = None         # format with {in_list}: -> oid, state, tid
    LOAD_REVISION = None         # (oid, tid) -> state
    #: Format with {oids} and {tids} (history-preserving; None: none
    #: kept): -> oid, tid, state
    LOAD_REVISIONS = None
    LOAD_BEFORE = None           # (oid, tid) -> state, tid
    NEXT_REVISION = None         # (oid, tid) -> tid
    EXISTS = None                # (oid) -> 1
    CURRENT_TIDS = None          # format with {in_list}: -> oid, tid
    CLEAR_TEMP = None
    UPLOAD_TEMP = None           # (oid, prev_tid, state, size, data_txn, ord)
    DETECT_CONFLICTS = None      # -> oid, committed_tid, prev_tid, state
    REPLACE_TEMP = None          # (prev_tid, state, size, oid)
    LOAD_TEMP = None             # (oid) -> prev_tid, state, data_txn
    STORE_SUPERSEDED = None      # (oid, tid, state, size, data_txn, ord)
    MOVE_FROM_TEMP = ()          # statements, each taking (tid,)
    OBJECT_COUNT = None
    ITER_CURRENT = None          # (start_oid, limit) -> oid, tid, state

    def check_state_size(self, oid, size):
        """Nothing to check where any state fits."""

    def _in_list(self, oids):
        """``(the text inside IN (...), its parameters)`` for ``oids``."""
        return ', '.join([self.PARAM] * len(oids)), oids

    def load_current(self, cursor, oid):
        cursor.execute(self.LOAD_CURRENT, (oid,))
        row = cursor.fetchone()
        if row is None:
            return None
        return _bytes(row[0]), row[1]

    def load_currents(self, cursor, oids):
        result = {}
        for chunk in batched(oids, self.IN_BATCH):
            in_list, params = self._in_list(chunk)
            cursor.execute(self.LOAD_CURRENTS.format(in_list=in_list), params)
            for oid, state, tid in cursor.fetchall():
                result[oid] = (_bytes(state), tid)
        return result

    def load_revision(self, cursor, oid, tid):
        cursor.execute(self.LOAD_REVISION, (oid, tid))
        row = cursor.fetchone()
        return None if row is None else _bytes(row[0])

    def load_revisions(self, cursor, revisions):
        """``{(oid, tid): state}`` of the revisions ``[(oid, tid)]`` that
        exist, in one round trip (per IN_BATCH oids)."""
        wanted = set(revisions)
        tid_list, tid_params = self._in_list(
            sorted({tid for _, tid in wanted}))
        found = {}
        for oids in batched(sorted({oid for oid, _ in wanted}),
                            self.IN_BATCH):
            oid_list, oid_params = self._in_list(oids)
            params = None if oid_params is None else (
                list(oid_params) + list(tid_params))
            cursor.execute(self.LOAD_REVISIONS.format(
                oids=oid_list, tids=tid_list), params)
            for oid, tid, state in cursor.fetchall():
                if (oid, tid) in wanted:
                    found[oid, tid] = _bytes(state)
        return found

    def load_before(self, cursor, oid, tid):
        cursor.execute(self.LOAD_BEFORE, (oid, tid))
        row = cursor.fetchone()
        if row is None:
            return None
        return _bytes(row[0]), row[1]

    def next_revision_tid(self, cursor, oid, tid):
        cursor.execute(self.NEXT_REVISION, (oid, tid))
        row = cursor.fetchone()
        return None if row is None else row[0]

    def exists(self, cursor, oid):
        cursor.execute(self.EXISTS, (oid,))
        return cursor.fetchone() is not None

    def current_tids(self, cursor, oids):
        result = {}
        for chunk in batched(oids, self.IN_BATCH):
            in_list, params = self._in_list(chunk)
            cursor.execute(self.CURRENT_TIDS.format(in_list=in_list), params)
            result.update(cursor.fetchall())
        return result

    def clear_temp(self, cursor):
        cursor.execute(self.CLEAR_TEMP)

    def empty_temp(self, cursor):
        # Every adapter stages in temp_store; a DELETE stays inside the
        # transaction (MySQL's TRUNCATE would commit it).
        cursor.execute('DELETE FROM temp_store')

    def upload_temp(self, cursor, rows, replace=()):
        # UPLOAD_TEMP replaces rows of oids in ``replace`` by itself.
        cursor.executemany(self.UPLOAD_TEMP, [
            (oid, prev_tid, state, 0 if state is None else len(state),
             data_txn, ord_)
            for oid, prev_tid, state, data_txn, ord_ in rows])

    def detect_conflicts(self, cursor):
        cursor.execute(self.DETECT_CONFLICTS)
        return [(oid, committed, prev, _bytes(state))
                for oid, committed, prev, state in cursor.fetchall()]

    def replace_temp(self, cursor, oid, prev_tid, state):
        cursor.execute(self.REPLACE_TEMP, (prev_tid, state, len(state), oid))

    def load_temp(self, cursor, oid):
        cursor.execute(self.LOAD_TEMP, (oid,))
        row = cursor.fetchone()
        return None if row is None else (row[0], _bytes(row[1]), row[2])

    def store_superseded(self, cursor, tid, rows):
        if self.STORE_SUPERSEDED is None:
            # History-free: only the current state is kept anyway.
            return
        cursor.executemany(self.STORE_SUPERSEDED, [
            (oid, tid, state, 0 if state is None else len(state), data_txn,
             ord_)
            for oid, state, data_txn, ord_ in rows])

    def move_from_temp(self, cursor, tid):
        for stmt in self.MOVE_FROM_TEMP:
            cursor.execute(stmt, (tid,))

    def object_count(self, cursor):
        cursor.execute(self.OBJECT_COUNT)
        return cursor.fetchone()[0]

    def iter_current(self, cursor, start_oid, limit):
        cursor.execute(self.ITER_CURRENT, (start_oid, limit))
        return [(oid, tid, _bytes(state))
                for oid, tid, state in cursor.fetchall()]


def _bytes(value):
    """Drivers return BLOBs as bytes, memoryview or buffer; ZODB wants
    bytes (and None for a deleted object)."""
    if value is None or type(value) is bytes:
        return value
    return bytes(value)
