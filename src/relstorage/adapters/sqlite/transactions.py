"""Transaction records for SQLite (the transaction-control role)."""
from relstorage.adapters.transactions import TransactionControl


class HistoryPreservingTransactionControl(TransactionControl):
    UPDATE_LAST_TID = 'UPDATE commit_row SET tid = ?'
    UPDATE_LAST_TID_TIMED = 'UPDATE commit_row SET tid = ?, commit_seconds = ?'
    INSERT_TRANSACTION = """
        INSERT INTO transaction_log
            (tid, packed, username, description, extension)
        VALUES (?, ?, ?, ?, ?)"""


class HistoryFreeTransactionControl(TransactionControl):
    UPDATE_LAST_TID = 'UPDATE commit_row SET tid = ?'
    UPDATE_LAST_TID_TIMED = 'UPDATE commit_row SET tid = ?, commit_seconds = ?'
