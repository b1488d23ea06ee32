"""Invalidation polling for SQLite (the poller role)."""
from relstorage.adapters.poll import Poller


class HistoryPreservingPoller(Poller):
    LAST_TID = 'SELECT tid FROM commit_row'
    CHANGES = 'SELECT zoid, tid FROM current_object WHERE tid > ? AND tid <= ?'


class HistoryFreePoller(Poller):
    LAST_TID = 'SELECT tid FROM commit_row'
    CHANGES = 'SELECT zoid, tid FROM object_state WHERE tid > ? AND tid <= ?'
