"""Transaction records for SQLite (the transaction-control role).

SQLite runs inside this process, so its clock is this process's
``time.time()`` (the shared default of ``now``).
"""
from relstorage.adapters.transactions import TransactionControl


class HistoryPreservingTransactionControl(TransactionControl):
    UPDATE_LAST_TID = 'UPDATE commit_row SET tid = ?'
    INSERT_TRANSACTION = """
        INSERT INTO transaction_log
            (tid, packed, username, description, extension)
        VALUES (?, ?, ?, ?, ?)"""


class HistoryFreeTransactionControl(TransactionControl):
    UPDATE_LAST_TID = 'UPDATE commit_row SET tid = ?'
