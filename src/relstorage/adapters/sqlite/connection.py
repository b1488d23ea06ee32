"""Connections to an SQLite database file (the connection-manager role)."""
import contextlib
import re

from relstorage.adapters.connection import ConnectionManager
from relstorage.adapters.interfaces import IConnectionManager
from relstorage.config.options import _byte_size
from relstorage.errors import CommitLockTimeoutError
from relstorage.errors import ConfigurationError
from relstorage.errors import DatabaseFullError
from zope.interface import implementer

#: The name of the database file inside data-dir.
DB_FILENAME = 'relstorage.sqlite3'

#: sqlite3's result code for "database or disk is full".
SQLITE_FULL = 13

#: Applied to every connection before the user's <pragmas>, which win.
#: synchronous=FULL makes every commit durable across an operating-system
#: crash, not only a process crash (NORMAL is faster and loses at most the
#: last commits on power loss).
DEFAULT_PRAGMAS = {
    'synchronous': 'full',
    'temp_store': 'memory',
    'cache_size': '-16000',
}

# Pragma values are spliced into the statement (SQLite cannot bind them),
# so only plain words and numbers are accepted.
_PRAGMA_VALUE = re.compile(r'^[A-Za-z0-9_.+-]+$')


#: Pragmas that RelStorage 4 took as sizes ("10MB"; a bare number is
#: bytes), as its configurations write them.
_SIZES = ('cache_size', 'mmap_size', 'page_size', 'soft_heap_limit')


def _rs4_size(key, text):
    """The SQLite value of pragma ``key`` given as ``text``: a size for
    the pragmas of _SIZES (a positive cache_size is bytes, turned into
    SQLite's negative count of KiB; a negative one is SQLite's own)."""
    if key not in _SIZES or text.startswith('-'):
        return text
    size = _byte_size(f'pragmas: {key}', 0, 1 << 62, text)
    if key == 'cache_size' and size:
        return str(-max(1, size // 1024))
    return str(size)


def check_pragmas(driver, pragmas):
    """Return the pragmas as ``{name: value}``, raising ConfigurationError
    naming the pragma for an unknown name or a value that is not a plain
    word or number."""
    conn = driver.connect(':memory:')
    try:
        known = {row[0] for row in conn.execute('PRAGMA pragma_list')}
    finally:
        conn.close()
    result = {}
    for name, value in (pragmas or {}).items():
        key = str(name).strip().lower()
        if isinstance(value, (list, tuple)):  # ZConfig gives lists
            if len(value) != 1:
                raise ConfigurationError(
                    f'pragmas: {key} is given {len(value)} times')
            value = value[0]
        text = _rs4_size(key, str(value).strip())
        if known and key not in known:
            raise ConfigurationError(
                f'pragmas: {key!r} is not a pragma this SQLite '
                f'knows (value {text!r})')
        if not _PRAGMA_VALUE.match(text):
            raise ConfigurationError(
                f'pragmas: {key} = {text!r} is not a plain word or number')
        result[key] = text
    return result


@implementer(IConnectionManager)
class SQLiteConnectionManager(ConnectionManager):

    def __init__(self, driver, path, pragmas, lock_timeout):
        self.driver = driver
        self.path = path
        self.pragmas = dict(DEFAULT_PRAGMAS)
        self.pragmas.update(pragmas)
        self.lock_timeout = lock_timeout

    def describe(self):
        return self.path

    def connect(self, timeout=None):
        """A connection in autocommit mode (we issue BEGIN ourselves), usable
        from whichever thread holds the owning storage's lock."""
        conn = self.driver.connect(
            self.path,
            timeout=self.lock_timeout if timeout is None else timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            for name, value in self.pragmas.items():
                try:
                    conn.execute(f'PRAGMA {name} = {value}')
                except self.driver.Error as e:
                    raise ConfigurationError(
                        f'pragmas: SQLite rejected {name} = {value!r}: {e}'
                    ) from e
        except BaseException:
            conn.close()
            raise
        return conn

    def open_load(self):
        conn = self.connect()
        # A snapshot connection never writes; make SQLite enforce that.
        conn.execute('PRAGMA query_only = 1')
        return conn, conn.cursor()

    def open_store(self):
        conn = self.connect()
        conn.execute("""
            CREATE TEMP TABLE IF NOT EXISTS temp_store (
                zoid        INTEGER PRIMARY KEY,
                prev_tid    INTEGER,
                state       BLOB,
                state_size  INTEGER NOT NULL,
                data_txn    INTEGER NOT NULL,
                ord         INTEGER NOT NULL
            )""")
        return conn, conn.cursor()

    def begin_store(self, conn, cursor):
        # Staging writes only the connection's private temp table, which
        # needs no lock; SQLite's write lock is taken at vote.
        pass

    def begin_snapshot(self, conn, cursor):
        # In WAL mode the snapshot is fixed by the first read after BEGIN
        # and lasts until the transaction ends; writers are not blocked.
        cursor.execute('BEGIN DEFERRED')

    def _in_transaction(self, conn):
        return conn.in_transaction

    def begin_write(self, cursor, what):
        """Take SQLite's database-wide write lock, waiting at most the lock
        timeout; ``what`` names the work for the error message."""
        if cursor.connection.in_transaction:
            # A restore batch: this connection's write transaction, which
            # holds the lock, goes on (store connections run in autocommit
            # mode otherwise, so no other transaction is open here).
            return
        with self.translate(what):
            cursor.execute('BEGIN IMMEDIATE')

    @contextlib.contextmanager
    def translate(self, what='committing'):
        try:
            yield
        except self.driver.OperationalError as e:
            if 'disk is full' in str(e) or getattr(
                    e, 'sqlite_errorcode', None) == SQLITE_FULL:
                raise DatabaseFullError(
                    f'{what}: the SQLite database {self.path} is full (its '
                    f'disk, or max_page_count); nothing of this transaction '
                    f'was committed ({e})') from e
            if 'locked' not in str(e) and 'busy' not in str(e):
                raise
            raise CommitLockTimeoutError(
                f'{what}: another connection kept the SQLite database '
                f'{self.path} locked for longer than commit-lock-timeout '
                f'({self.lock_timeout:g}s)') from e
