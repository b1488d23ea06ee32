"""Invalidation polling for MySQL (the poller role)."""
from relstorage.adapters.poll import Poller


class HistoryPreservingPoller(Poller):
    LAST_TID = 'SELECT tid FROM commit_row WHERE id = 0'
    CHANGES = """
        SELECT zoid, tid FROM current_object WHERE tid > %s AND tid <= %s"""


class HistoryFreePoller(Poller):
    LAST_TID = 'SELECT tid FROM commit_row WHERE id = 0'
    CHANGES = """
        SELECT zoid, tid FROM object_state WHERE tid > %s AND tid <= %s"""
