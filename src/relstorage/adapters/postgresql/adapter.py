"""The PostgreSQL adapter, on psycopg2 (default) or psycopg 3."""
from relstorage.adapters.adapter import Adapter
from relstorage.adapters.interfaces import IAdapter
from relstorage.adapters.interfaces import ICapabilities
from relstorage.config.options import convert_section
from relstorage.config.replicas import replica_lists
from zope.interface import implementer

from . import history
from . import locks
from . import objects
from . import pack
from . import poll
from . import transactions
from .blobs import PostgreSQLBlobMover
from .connection import PostgreSQLConnectionManager
from .connection import SNAPSHOT_BEGIN_WRITABLE
from .connection import describe_dsn
from .drivers import RESULT_EMPTIED
from .drivers import select_driver
from .mirror import PostgreSQLMirror
from .oids import PostgreSQLOIDAllocator
from .schema import PostgreSQLSchema


@implementer(ICapabilities)
class PostgreSQLCapabilities:
    advisory_locks = True
    row_lock_nowait = True
    shared_row_locks = True
    database_wide_write_lock = False
    multiple_processes = True
    tids_from_local_clock = False
    network_round_trips = True
    lists_open_transactions = True
    json_mirror = True


@implementer(IAdapter)
class PostgreSQLAdapter(Adapter):
    """``PostgreSQLAdapter(dsn='', driver='auto')``.

    ``dsn`` is a libpq connection string (``dbname=zodb host=db user=zope``)
    and may hold a password; it never appears in messages or ``repr()``.
    """

    capabilities = PostgreSQLCapabilities()

    def __init__(self, dsn='', driver=None, transaction_pooler=None):
        given = {'dsn': dsn}
        if driver is not None:
            given['driver'] = driver
        if transaction_pooler is not None:
            given['transaction_pooler'] = transaction_pooler
        values = convert_section('postgresql', given)
        self._dsn = values['dsn'] or ''
        self.driver_name = values['driver']
        self.driver = select_driver(self.driver_name)
        #: Nothing outlives a transaction in a session (PgBouncer's
        #: transaction mode): see component.xml's transaction-pooler.
        self.transaction_pooler = values['transaction_pooler']
        self.driver.server_prepares = not self.transaction_pooler
        self._description = describe_dsn(self.driver, self._dsn)

    def _configure(self, options):
        hp = options.keep_history
        driver = self.driver
        self.connmanager = cm = PostgreSQLConnectionManager(
            driver, self._dsn, options.commit_lock_timeout)
        cm.use_replicas(*replica_lists(options))
        self.schema = PostgreSQLSchema(cm, hp)
        self.mirror = PostgreSQLMirror(hp)
        self.oids = PostgreSQLOIDAllocator()
        self.blobs = PostgreSQLBlobMover(driver)
        if hp:
            self.locker = locks.HistoryPreservingLocker(cm)
            self.mover = objects.HistoryPreservingMover(driver)
            self.poller = poll.HistoryPreservingPoller(driver)
            self.txncontrol = (
                transactions.HistoryPreservingTransactionControl(
                    driver, objects.HistoryPreservingMover.MOVE_STAGED))
            self.history = history.HistoryPreservingHistory()
            self.packer = pack.HistoryPreservingPacker(cm)
        else:
            self.locker = locks.HistoryFreeLocker(cm)
            self.mover = objects.HistoryFreeMover(driver)
            self.poller = poll.HistoryFreePoller(driver)
            self.txncontrol = transactions.HistoryFreeTransactionControl(
                driver, objects.HistoryFreeMover.MOVE_STAGED)
            self.history = history.HistoryFreeHistory()
            self.packer = pack.HistoryFreePacker(cm)
        cm.prepared = self.mover.prepared() + self.poller.prepared()
        if self.transaction_pooler:
            cm.prepared = []
            cm.transaction_pooler = True
            self.poller.SNAPSHOT_BEGIN = SNAPSHOT_BEGIN_WRITABLE
            self.poller.tags_sessions = True
            self.txncontrol.read_result = RESULT_EMPTIED
            self.mover.staging_per_transaction = True
            self.packer.lease_lock = True

    def database_size(self):
        conn = self.connmanager.connect()
        try:
            cursor = conn.cursor()
            cursor.execute('SELECT pg_database_size(current_database())')
            return cursor.fetchone()[0]
        finally:
            self.connmanager.close(conn, None)

    def describe(self):
        return self._description

    def __repr__(self):
        return f'<PostgreSQLAdapter {self._description} ({self.driver.name})>'
