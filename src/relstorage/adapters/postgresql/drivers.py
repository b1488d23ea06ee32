"""PostgreSQL drivers: psycopg2 (the default) and psycopg 3.

Each driver object gives the adapter what differs between the two modules:
connecting, bulk COPY, and the exception classes.  ``select_driver`` fails
at start-up, naming the package to install, when a named driver is missing.
"""
import struct

from relstorage.errors import ConfigurationError

# The binary COPY format: a signature, flags and header-extension length,
# then one tuple per row (field count, then each field's length and bytes),
# then -1.  Used with psycopg2, which has no row-level COPY writer.
_COPY_HEADER = b'PGCOPY\n\xff\r\n\x00' + struct.pack('!ii', 0, 0)
_COPY_TRAILER = struct.pack('!h', -1)
_NULL = struct.pack('!i', -1)
_INT8 = struct.pack('!i', 8)


def binary_copy_data(rows):
    """Encode rows of ints (BIGINT), bytes (BYTEA) and None as PostgreSQL's
    binary COPY format."""
    out = [_COPY_HEADER]
    append = out.append
    pack_q = struct.Struct('!q').pack
    pack_i = struct.Struct('!i').pack
    for row in rows:
        append(struct.pack('!h', len(row)))
        for value in row:
            if value is None:
                append(_NULL)
            elif isinstance(value, int):
                append(_INT8)
                append(pack_q(value))
            else:
                append(pack_i(len(value)))
                append(value)
    append(_COPY_TRAILER)
    return b''.join(out)


class Psycopg2Driver:
    name = 'psycopg2'
    package = 'psycopg2 (pip install psycopg2-binary, or relstorage[postgresql])'

    def __init__(self):
        import psycopg2
        import psycopg2.errors
        import psycopg2.extensions
        self.module = psycopg2
        self.Error = psycopg2.Error
        self.OperationalError = psycopg2.OperationalError
        self.InterfaceError = psycopg2.InterfaceError
        self.IntegrityError = psycopg2.IntegrityError

    def connect(self, dsn):
        conn = self.module.connect(dsn)
        conn.autocommit = True
        return conn

    def parse_dsn(self, dsn):
        from psycopg2.extensions import parse_dsn
        return parse_dsn(dsn)

    def sqlstate(self, error):
        return getattr(error, 'pgcode', None)

    def copy_in(self, cursor, table, columns, rows):
        import io
        data = binary_copy_data(rows)
        cursor.copy_expert(
            f'COPY {table} ({", ".join(columns)}) FROM STDIN '
            f'WITH (FORMAT binary)', io.BytesIO(data), size=65536)


class PsycopgDriver:
    name = 'psycopg'
    package = 'psycopg 3 (pip install "psycopg[binary]", or relstorage[postgresql])'

    def __init__(self):
        import psycopg
        self.module = psycopg
        self.Error = psycopg.Error
        self.OperationalError = psycopg.OperationalError
        self.InterfaceError = psycopg.InterfaceError
        self.IntegrityError = psycopg.IntegrityError

    def connect(self, dsn):
        # prepare_threshold=None: no server-side prepared statements, which
        # would break behind transaction-pooling proxies (pgbouncer).
        return self.module.connect(dsn, autocommit=True, prepare_threshold=None)

    def parse_dsn(self, dsn):
        from psycopg.conninfo import conninfo_to_dict
        return conninfo_to_dict(dsn)

    def sqlstate(self, error):
        return getattr(error, 'sqlstate', None)

    def copy_in(self, cursor, table, columns, rows):
        with cursor.copy(
                f'COPY {table} ({", ".join(columns)}) FROM STDIN '
                f'WITH (FORMAT binary)') as copy:
            copy.write(binary_copy_data(rows))


DRIVERS = {'psycopg2': Psycopg2Driver, 'psycopg': PsycopgDriver}


def select_driver(name):
    """The driver for the ``driver`` option: ``auto`` tries psycopg2, then
    psycopg 3."""
    if name == 'auto':
        errors = []
        for candidate in ('psycopg2', 'psycopg'):
            try:
                return DRIVERS[candidate]()
            except ImportError as e:
                errors.append(f'{candidate}: {e}')
        raise ConfigurationError(
            'driver: auto found no PostgreSQL driver; install psycopg2 '
            '(pip install psycopg2-binary) or psycopg 3 (pip install '
            '"psycopg[binary]"), or relstorage[postgresql] for both '
            f'({"; ".join(errors)})')
    try:
        factory = DRIVERS[name]
    except KeyError:
        raise ConfigurationError(
            f'driver: {name!r} is not one of auto, psycopg2, psycopg'
        ) from None
    try:
        return factory()
    except ImportError as e:
        raise ConfigurationError(
            f'driver: {name!r} is not installed; install '
            f'{factory.package} ({e})') from e
