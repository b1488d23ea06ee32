"""The Oracle adapter, on python-oracledb (default) or cx_Oracle.

No Oracle server runs where relstorage is developed and tested: every
statement is parsed as Oracle SQL and the configuration, driver choice and
error translation are tested without one; the server suite runs where
RELSTORAGE_ORACLE_DSN names a database (docs/oracle.rst).
"""
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
from .blobs import OracleBlobMover
from .connection import OracleConnectionManager
from .connection import describe_target
from .drivers import select_driver
from .oids import OracleOIDAllocator
from .schema import OracleSchema


@implementer(ICapabilities)
class OracleCapabilities:
    advisory_locks = False          # DBMS_LOCK needs a grant: not used
    row_lock_nowait = True
    shared_row_locks = False        # read-current rows: FOR UPDATE NOWAIT
    database_wide_write_lock = False
    multiple_processes = True
    tids_from_local_clock = False
    network_round_trips = True
    # Read-only snapshots do not show in V$TRANSACTION (see pack.py).
    lists_open_transactions = False
    json_mirror = False


@implementer(IAdapter)
class OracleAdapter(Adapter):
    """``OracleAdapter(user=..., password=..., dsn=..., driver='auto')``:
    the keys of the ``<oracle>`` section.  The password never appears in
    messages or ``repr()``."""

    capabilities = OracleCapabilities()

    def __init__(self, user=None, password=None, dsn=None, driver=None):
        given = {'user': user, 'password': password, 'dsn': dsn}
        if driver is not None:
            given['driver'] = driver
        values = convert_section('oracle', given)
        for key in ('user', 'password', 'dsn'):
            if not values[key]:
                from relstorage.errors import ConfigurationError
                raise ConfigurationError(f'{key}: the Oracle adapter needs '
                                         f'it (the <oracle> section\'s key)')
        self._user = values['user']
        self._password = values['password']
        self._dsn = values['dsn']
        self.driver_name = values['driver']
        self.driver = select_driver(self.driver_name)
        self._description = describe_target(self._user, self._dsn)

    def _configure(self, options):
        hp = options.keep_history
        self.connmanager = cm = OracleConnectionManager(
            self.driver, self._user, self._password, self._dsn,
            options.commit_lock_timeout)
        cm.use_replicas(*replica_lists(options))
        self.schema = OracleSchema(cm, hp)
        self.oids = OracleOIDAllocator()
        self.blobs = OracleBlobMover(cm)
        if hp:
            self.locker = locks.HistoryPreservingLocker(cm)
            self.mover = objects.HistoryPreservingMover(cm)
            self.poller = poll.HistoryPreservingPoller()
            self.txncontrol = (
                transactions.HistoryPreservingTransactionControl(
                    cm, self.mover.MOVE_FROM_TEMP))
            self.history = history.HistoryPreservingHistory()
            self.packer = pack.HistoryPreservingPacker(cm)
        else:
            self.locker = locks.HistoryFreeLocker(cm)
            self.mover = objects.HistoryFreeMover(cm)
            self.poller = poll.HistoryFreePoller()
            self.txncontrol = transactions.HistoryFreeTransactionControl(
                cm, self.mover.MOVE_FROM_TEMP)
            self.history = history.HistoryFreeHistory()
            self.packer = pack.HistoryFreePacker(cm)

    def database_size(self):
        conn = self.connmanager.connect()
        try:
            cursor = conn.cursor()
            cursor.execute(OracleSchema.SIZE)
            return int(cursor.fetchone()[0] or 0)
        finally:
            self.connmanager.close(conn, None)

    def describe(self):
        return self._description

    def __repr__(self):
        return f'<OracleAdapter {self._description} ({self.driver.name})>'
