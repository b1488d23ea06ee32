"""Oracle drivers: python-oracledb (the default, in its thin mode: no
Oracle client libraries needed) and cx_Oracle (its predecessor, for sites
that have it and its client libraries).

Both have the same API; the driver object gives the adapter the module,
its exception classes and its type for BLOB binds.  ``select_driver``
fails at start-up, naming the package to install, when a named driver is
missing.
"""
import re

from relstorage.adapters import drivers


class _Driver:
    name = None
    package = None

    def _bind(self, module):
        self.module = module
        self.Error = module.Error
        self.DatabaseError = module.DatabaseError
        self.OperationalError = module.OperationalError
        self.InterfaceError = module.InterfaceError
        self.IntegrityError = module.IntegrityError

    def connect(self, user, password, dsn):
        """A connection outside autocommit (Oracle starts a transaction at
        the first statement, and relstorage ends each with commit() or
        rollback()) that fetches BLOB columns as bytes."""
        conn = self.module.connect(user=user, password=password, dsn=dsn)
        conn.autocommit = False
        # A state, a chunk of a blob or transaction metadata is read whole:
        # as bytes in the fetch's round trip rather than a LOB locator
        # read by one more round trip per value.
        conn.outputtypehandler = self.blobs_as_bytes
        return conn

    def _bytes_var(self, cursor, type_code):
        if type_code is self.BLOB:
            return cursor.var(self.LONG_BINARY, arraysize=cursor.arraysize)
        return None


class OracledbDriver(_Driver):
    name = 'oracledb'
    package = 'python-oracledb (pip install oracledb), or relstorage[oracle]'

    def __init__(self):
        import oracledb
        self._bind(oracledb)
        self.BLOB = oracledb.DB_TYPE_BLOB
        self.LONG_BINARY = oracledb.DB_TYPE_LONG_RAW
        self.RAW = oracledb.DB_TYPE_RAW
        self.NUMBER = oracledb.DB_TYPE_NUMBER

    def blobs_as_bytes(self, cursor, metadata):
        """The output type handler (python-oracledb's signature)."""
        return self._bytes_var(cursor, metadata.type_code)


class CxOracleDriver(_Driver):
    name = 'cx_Oracle'
    package = ('cx_Oracle (pip install cx_Oracle; it needs the Oracle '
               'client libraries)')

    def __init__(self):
        import cx_Oracle
        self._bind(cx_Oracle)
        self.BLOB = cx_Oracle.DB_TYPE_BLOB
        self.LONG_BINARY = cx_Oracle.DB_TYPE_LONG_RAW
        self.RAW = cx_Oracle.DB_TYPE_RAW
        self.NUMBER = cx_Oracle.DB_TYPE_NUMBER

    def blobs_as_bytes(self, cursor, name, default_type, size, precision,
                       scale):
        """The output type handler (cx_Oracle's signature)."""
        return self._bytes_var(cursor, default_type)


_CODE = re.compile(r'\b(ORA|DPY|DPI|TNS)-(\d+)')


def error_code(error):
    """The error of a driver exception as ``'ORA-00054'`` (or ``DPY-``,
    ``DPI-``, ``TNS-`` codes of the drivers themselves), or None."""
    args = getattr(error, 'args', ())
    detail = args[0] if args else None
    full = getattr(detail, 'full_code', None)
    if full:
        return full
    code = getattr(detail, 'code', None)
    if isinstance(code, int) and code:
        return f'ORA-{code:05d}'
    found = _CODE.search(str(getattr(detail, 'message', None) or error))
    return f'{found.group(1)}-{found.group(2)}' if found else None


DRIVERS = {'oracledb': OracledbDriver, 'cx_Oracle': CxOracleDriver}


def select_driver(name):
    """The driver for the ``driver`` option: ``auto`` tries
    python-oracledb, then cx_Oracle."""
    return drivers.select_driver(
        name, DRIVERS, 'Oracle',
        'install python-oracledb (pip install oracledb, or '
        'relstorage[oracle])')
