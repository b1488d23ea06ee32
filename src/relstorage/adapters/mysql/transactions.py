"""Transaction records for MySQL (the transaction-control role)."""
from relstorage.adapters.transactions import TransactionControl


class HistoryPreservingTransactionControl(TransactionControl):
    UPDATE_LAST_TID = 'UPDATE commit_row SET tid = %s WHERE id = 0'
    INSERT_TRANSACTION = """
        INSERT INTO transaction_log
            (tid, packed, username, description, extension)
        VALUES (%s, %s, %s, %s, %s)"""


class HistoryFreeTransactionControl(TransactionControl):
    UPDATE_LAST_TID = 'UPDATE commit_row SET tid = %s WHERE id = 0'
