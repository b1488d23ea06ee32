"""Transaction records for PostgreSQL (the transaction-control role).
Transaction ids come from the server's clock."""
from relstorage.adapters.transactions import TransactionControl


class HistoryPreservingTransactionControl(TransactionControl):
    NOW = 'SELECT EXTRACT(EPOCH FROM clock_timestamp())'
    UPDATE_LAST_TID = 'UPDATE commit_row SET tid = %s WHERE id = 0'
    INSERT_TRANSACTION = """
        INSERT INTO transaction_log
            (tid, packed, username, description, extension)
        VALUES (%s, %s, %s, %s, %s)"""


class HistoryFreeTransactionControl(TransactionControl):
    NOW = 'SELECT EXTRACT(EPOCH FROM clock_timestamp())'
    UPDATE_LAST_TID = 'UPDATE commit_row SET tid = %s WHERE id = 0'
