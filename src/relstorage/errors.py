"""The errors relstorage raises, beyond ZODB's own.

Driver errors are mapped onto this small hierarchy so that callers can tell
a conflict (retry the transaction), a lock timeout (retry later) and a lost
connection (retry the transaction; nothing was committed) apart without
knowing which database is underneath, and a lost connection whose commit
may or may not have happened (do not retry blindly) from both.
"""
import pickle

from ZODB.POSException import ConflictError
from transaction.interfaces import TransientError
from ZODB.POSException import StorageError

__all__ = [
    'ConfigurationError',
    'CommitLockTimeoutError',
    'LockConflictError',
    'DisconnectedError',
    'CommitOutcomeUnknownError',
    'DatabaseFullError',
    'MaxConnectionsError',
    'SchemaError',
    'PackError',
    'PackStopped',
    'ConvertError',
    'ConvertStopped',
    'ClassNotAllowedError',
]


class ClassNotAllowedError(pickle.UnpicklingError):
    """A pickle being loaded names a class or function that the
    ``allowed-classes`` option does not admit (relstorage.classes);
    nothing of it was imported or run."""

    def __init__(self, module, name):
        super().__init__(
            f'a pickle names {module}.{name}, which allowed-classes does '
            f'not admit (nothing was imported)')
        self.module, self.name = module, name


class ConfigurationError(StorageError, ValueError):
    """A configuration key has a value that cannot be used.

    It is a ValueError so that ZConfig reports it with the file and line
    of the offending key.
    """


class CommitLockTimeoutError(TransientError, StorageError):
    """A lock needed to commit was not granted within commit-lock-timeout.

    Nothing was written; the transaction may be retried.
    """


class LockConflictError(ConflictError):
    """An object lock could not be taken because another transaction holds
    it (or the database chose this transaction as a deadlock victim)."""


class DisconnectedError(TransientError, StorageError):
    """The connection to the database was lost.

    Outside a commit the storage reconnects by itself; inside a commit the
    transaction fails with this error and nothing of it is visible.  When
    the connection goes during the last step of a commit, the storage first
    checks on a new connection that the commit did not happen before it
    raises this error (otherwise: CommitOutcomeUnknownError).
    """


class CommitOutcomeUnknownError(StorageError):
    """The connection was lost while the last step of a commit (its COMMIT)
    was on its way, and the storage could not tell afterwards whether the
    database committed it: the database was out of reach, or the objects
    the commit wrote have changed since.

    Deliberately not a TransientError: retrying a transaction that did
    commit would apply it twice.  The transaction is wholly committed or
    wholly absent; the application should look at the data (or its own
    records) before doing the work again.  The message says what the
    storage found.
    """


class DatabaseFullError(StorageError):
    """The database ran out of space: its disk is full, or a size limit of
    the database was reached.  Nothing of the transaction was committed;
    what was committed before is intact and readable.  Not a
    TransientError: a retry fails the same way until space is freed.
    """


class MaxConnectionsError(TransientError, StorageError):
    """Every connection that max-connections allows this process was in
    use for max-connections-wait seconds.  Nothing was written; the
    transaction may be retried.
    """


class SchemaError(StorageError):
    """The database does not hold the schema this storage expects."""


class PackError(StorageError):
    """A pack cannot run: another pack of the database is running, or the
    analysis it was asked to use (pack-skip-prepack) is missing or
    unusable.  Nothing was removed."""


class PackStopped(Exception):
    """A pack stopped at a batch boundary because it was asked to (zodbpack
    on Ctrl-C).  What it removed stays removed; a later pack goes on."""


class ConvertError(StorageError):
    """A copy (zodbconvert) cannot go on: the destination holds data it was
    not told to keep or continue, it is not a copy of this source, or a
    source record cannot be read.  The message names the transaction (and
    oid) concerned; nothing of that transaction was written."""


class ConvertStopped(Exception):
    """A copy or verification stopped at a transaction boundary because it
    was asked to (zodbconvert on Ctrl-C); ``--incremental`` goes on."""
