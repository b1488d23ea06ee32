"""MySQL drivers: mysqlclient (the default) and PyMySQL (pure Python).

Each driver object gives the adapter what differs between them: the
connect call, the exception classes and the server error number.
``select_driver`` fails at start-up, naming the package to install, when a
named driver is missing.
"""
import functools

from relstorage.adapters import drivers


class MySQLclientDriver:
    name = 'mysqlclient'
    package = ('mysqlclient (pip install mysqlclient; it builds against '
               'libmariadb-dev or libmysqlclient-dev), or relstorage[mysql]')

    def __init__(self):
        import MySQLdb
        self.module = MySQLdb
        self.Error = MySQLdb.Error
        self.OperationalError = MySQLdb.OperationalError
        self.InterfaceError = MySQLdb.InterfaceError

    def connect(self, params):
        from MySQLdb.constants import CLIENT
        # Multi-statement queries: the last step of a commit is one batch.
        return self.module.connect(
            autocommit=True, charset='utf8mb4',
            client_flag=CLIENT.MULTI_STATEMENTS, **params)


class PyMySQLDriver:
    name = 'PyMySQL'
    package = 'PyMySQL (pip install PyMySQL), or relstorage[mysql]'

    def __init__(self):
        import pymysql
        self.module = pymysql
        self.Error = pymysql.err.Error
        self.OperationalError = pymysql.err.OperationalError
        self.InterfaceError = pymysql.err.InterfaceError
        self._connection_class = _connection_class(pymysql)

    def connect(self, params):
        params = dict(params)
        # PyMySQL's names for two of libmysqlclient's keys.
        if 'passwd' in params:
            params['password'] = params.pop('passwd')
        if 'db' in params:
            params['database'] = params.pop('db')
        return self._connection_class(
            autocommit=True, charset='utf8mb4',
            client_flag=self.module.constants.CLIENT.MULTI_STATEMENTS,
            **params)


@functools.lru_cache(maxsize=None)
def _connection_class(pymysql):
    """PyMySQL's Connection, sharing one default TLS context in the
    process.

    With no ssl options PyMySQL prefers TLS and builds a fresh default
    SSLContext for every connection, which loads the system's CA
    certificates each time (23 ms of a 30 ms connect, measured here with
    cProfile).  The default context is the same every time, so it is made
    once per process (the class, and with it the context, is made once:
    every adapter opened has a driver of its own).  Explicit ssl options
    still get a context of their own.
    """
    base = pymysql.connections.Connection
    if not hasattr(base, '_create_ssl_ctx'):
        return base
    shared = []

    class Connection(base):
        def _create_ssl_ctx(self, sslp):
            if sslp:
                return super()._create_ssl_ctx(sslp)
            if not shared:
                shared.append(super()._create_ssl_ctx(sslp))
            return shared[0]

    return Connection


def error_number(error):
    """The server's error number (ER_...) of a driver exception, or None."""
    args = getattr(error, 'args', ())
    return args[0] if args and isinstance(args[0], int) else None


DRIVERS = {'mysqlclient': MySQLclientDriver, 'PyMySQL': PyMySQLDriver}


def select_driver(name):
    """The driver for the ``driver`` option: ``auto`` tries mysqlclient,
    then PyMySQL."""
    return drivers.select_driver(
        name, DRIVERS, 'MySQL',
        'install mysqlclient or PyMySQL, or relstorage[mysql]')
