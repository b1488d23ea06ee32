"""Shared default of the poller role (see interfaces.IPoller)."""
from relstorage.adapters.interfaces import IPoller
from zope.interface import implementer


@implementer(IPoller)
class Poller:

    LAST_TID = None   # () -> tid
    CHANGES = None    # (after_tid, last_tid) -> oid, tid

    def last_tid(self, cursor):
        cursor.execute(self.LAST_TID)
        row = cursor.fetchone()
        return row[0] if row and row[0] is not None else 0

    def changes(self, cursor, after_tid, last_tid):
        cursor.execute(self.CHANGES, (after_tid, last_tid))
        return cursor.fetchall()
