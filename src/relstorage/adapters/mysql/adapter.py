"""The MySQL and MariaDB adapter, on mysqlclient (default) or PyMySQL."""
import logging

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
from .blobs import MySQLBlobMover
from .connection import MySQLConnectionManager
from .connection import describe_params
from .drivers import select_driver
from .mirror import MySQLMirror
from .oids import MySQLOIDAllocator
from .schema import MySQLSchema

log = logging.getLogger(__name__)

#: The <mysql> keys passed to the driver's connect(), by their names.
CONNECT_KEYS = ('host', 'port', 'user', 'passwd', 'db', 'unix_socket',
                'connect_timeout', 'read_default_file', 'read_default_group',
                'compress', 'named_pipe')
#: Keys only libmysqlclient (mysqlclient) understands; PyMySQL refuses them.
_LIBMYSQL_ONLY = ('compress', 'named_pipe')


@implementer(ICapabilities)
class MySQLCapabilities:
    advisory_locks = False          # GET_LOCK exists but is not used
    row_lock_nowait = True
    shared_row_locks = True
    database_wide_write_lock = False
    multiple_processes = True
    tids_from_local_clock = False
    network_round_trips = True
    lists_open_transactions = True
    json_mirror = True


@implementer(IAdapter)
class MySQLAdapter(Adapter):
    """``MySQLAdapter(host=..., port=..., user=..., passwd=..., db=...,
    unix_socket=..., connect_timeout=..., read_default_file=...,
    read_default_group=..., driver='auto')``: the keys of the ``<mysql>``
    section.  The password never appears in messages or ``repr()``.
    """

    capabilities = MySQLCapabilities()

    def __init__(self, driver=None, **keys):
        given = dict(keys)
        if driver is not None:
            given['driver'] = driver
        values = convert_section('mysql', given)
        self.driver_name = values.pop('driver')
        self.driver = select_driver(self.driver_name)
        self._params = {k: v for k, v in values.items() if v not in (None, '')}
        if self.driver.name == 'PyMySQL':
            for key in _LIBMYSQL_ONLY:
                if self._params.pop(key, None):
                    log.warning('mysql option %s is ignored: PyMySQL cannot '
                                'do it (mysqlclient can)', key)
        self._description = describe_params(self._params)

    def _configure(self, options):
        hp = options.keep_history
        self.connmanager = cm = MySQLConnectionManager(
            self.driver, self._params, options.commit_lock_timeout)
        cm.use_replicas(*replica_lists(options))
        self.schema = MySQLSchema(cm, hp)
        self.mirror = MySQLMirror(hp)
        self.oids = MySQLOIDAllocator()
        self.blobs = MySQLBlobMover(cm)
        if hp:
            self.locker = locks.HistoryPreservingLocker(cm)
            self.mover = objects.HistoryPreservingMover(cm)
            self.poller = poll.HistoryPreservingPoller()
            self.txncontrol = (
                transactions.HistoryPreservingTransactionControl(
                    cm, self.mover.MOVE_FROM_TEMP, self.mover.move_rows))
            self.history = history.HistoryPreservingHistory()
            self.packer = pack.HistoryPreservingPacker(cm)
        else:
            self.locker = locks.HistoryFreeLocker(cm)
            self.mover = objects.HistoryFreeMover(cm)
            self.poller = poll.HistoryFreePoller()
            self.txncontrol = transactions.HistoryFreeTransactionControl(
                cm, self.mover.MOVE_FROM_TEMP, self.mover.move_rows)
            self.history = history.HistoryFreeHistory()
            self.packer = pack.HistoryFreePacker(cm)

    def database_size(self):
        conn = self.connmanager.connect()
        try:
            cursor = conn.cursor()
            cursor.execute("""
                SELECT COALESCE(SUM(data_length + index_length), 0)
                FROM information_schema.tables
                WHERE table_schema = DATABASE()""")
            return int(cursor.fetchone()[0])
        finally:
            self.connmanager.close(conn, None)

    def describe(self):
        return self._description

    def __repr__(self):
        return f'<MySQLAdapter {self._description} ({self.driver.name})>'
