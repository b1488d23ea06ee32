"""zodburi resolvers: relstorage from a URI (Pyramid's ``zodbconn.uri``
and other zodburi users).

Registered under the ``zodburi.resolvers`` entry point group::

    postgresql://user:password@host:port/dbname?keep_history=false
    postgres://...                       (the same)
    mysql://user:password@host:port/dbname?cache_local_mb=100
    sqlite:///var/lib/zodb/data?pragma_synchronous=normal
    sqlite://?data_dir=/var/lib/zodb/data  (RelStorage 4's form)

The query's keys (``_`` or ``-`` alike) are, in this order: the options
of the ``<relstorage>`` section (``keep_history``, ``blob_dir``, ...);
the keys of the database's section (``driver``; MySQL's ``unix_socket``,
``connect_timeout``, ...; SQLite's ``pragma_<name>`` for a pragma);
PostgreSQL's libpq connection parameters (``sslmode``,
``application_name``, ...), added to the DSN; zodburi's own keys for
``ZODB.DB`` (``database_name``, ``connection_cache_size``, ...), handed
back to zodburi; and ``demostorage=true``, which wraps the storage in a
DemoStorage as zodburi's file:// resolver does.  Any other key is an
error that names it.  Options are checked when the URI is resolved; the
database is first reached when the storage is opened.

zodburi is not imported here: a resolver is a callable taking the URI
and returning ``(factory, dbkw)``.
"""
import os
from urllib.parse import parse_qsl
from urllib.parse import unquote
from urllib.parse import urlsplit

from relstorage.config.options import ConfigurationError
from relstorage.config.options import Options
from relstorage.config.options import section_keys

#: libpq's connection parameters that a URI may add to the DSN (the
#: PostgreSQL manual, "Parameter Key Words").
LIBPQ_KEYS = frozenset((
    'hostaddr', 'passfile', 'connect_timeout', 'client_encoding', 'options',
    'application_name', 'fallback_application_name', 'keepalives',
    'keepalives_idle', 'keepalives_interval', 'keepalives_count',
    'tcp_user_timeout', 'replication', 'gssencmode', 'sslmode',
    'requiressl', 'sslcompression', 'sslcert', 'sslkey', 'sslpassword',
    'sslcertmode', 'sslrootcert', 'sslcrl', 'sslcrldir', 'sslsni',
    'requirepeer', 'ssl_min_protocol_version', 'ssl_max_protocol_version',
    'krbsrvname', 'gsslib', 'gssdelegation', 'service',
    'target_session_attrs', 'load_balance_hosts', 'channel_binding',
    'require_auth'))

#: zodburi's keys for ZODB.DB: ``database_name`` and ``connection_*``.
_DB_PREFIX = 'connection_'
_TRUE = ('1', 'true', 'yes', 'on')
_FALSE = ('0', 'false', 'no', 'off', '')


def _attr(key):
    return key.strip().replace('-', '_')


def _query(uri, split):
    """The query's ``{key: value}`` (keys with ``_``), one value each."""
    found = {}
    for key, value in parse_qsl(split.query, keep_blank_values=True):
        key = _attr(key)
        if key in found:
            raise ConfigurationError(f'{uri}: {key} is given twice')
        found[key] = value
    return found


def _split(params, adapter_section, uri):
    """Take the relstorage options, the adapter's keys, zodburi's DB keys
    and demostorage out of ``params``; what is left is returned as the
    fourth item for the caller's own keys."""
    ours = {_attr(k) for k in section_keys('relstorage')}
    adapter = {_attr(k) for k in section_keys(adapter_section)}
    options, keys, dbkw, demo = {}, {}, {}, False
    rest = {}
    for key, value in params.items():
        if key in ours:
            options[key] = value
        elif key in adapter:
            keys[key] = value
        elif key == 'database_name' or key.startswith(_DB_PREFIX):
            dbkw[key] = value
        elif key == 'demostorage':
            if value.strip().lower() not in _TRUE + _FALSE:
                raise ConfigurationError(
                    f'{uri}: demostorage={value!r} is not true or false')
            demo = value.strip().lower() in _TRUE
        else:
            rest[key] = value
    return options, keys, dbkw, demo, rest


def _unknown(uri, rest, scheme, extra=''):
    if rest:
        names = ', '.join(sorted(rest))
        raise ConfigurationError(
            f'{uri}: unknown option(s) {names}: a {scheme} URI takes the '
            f'options of <relstorage> and of its database section{extra}, '
            f'database_name, connection_* and demostorage')


def _server(split):
    """``host``, ``port``, ``user``, ``password`` and ``dbname`` as the
    URI ``split`` gives them (percent-decoded), libpq's names."""
    found = {}
    for key, value in (('host', split.hostname), ('port', split.port),
                       ('user', split.username),
                       ('password', split.password),
                       ('dbname', split.path.lstrip('/'))):
        if value:
            found[key] = value if key == 'port' else unquote(value)
    return found


def _factory(make_adapter, options, demo):
    def factory():
        from relstorage.storage import RelStorage
        storage = RelStorage(make_adapter(), options=options)
        if demo:
            from ZODB.DemoStorage import DemoStorage
            return DemoStorage(base=storage)
        return storage
    return factory


def _options(uri, options):
    try:
        return Options(**options)
    except ConfigurationError as e:
        raise ConfigurationError(f'{uri}: {e}') from None


def _dsn_value(value):
    """A libpq keyword value, quoted when it needs to be."""
    text = str(value)
    if text and not any(c in text for c in " '\\\t\n"):
        return text
    return "'" + text.replace('\\', '\\\\').replace("'", "\\'") + "'"


def resolve_postgresql(uri):
    """``postgresql://`` and ``postgres://``."""
    split = urlsplit(uri)
    params = _query(uri, split)
    options, keys, dbkw, demo, rest = _split(params, 'postgresql', uri)
    libpq = {k: v for k, v in rest.items() if k in LIBPQ_KEYS}
    _unknown(uri, {k: v for k, v in rest.items() if k not in LIBPQ_KEYS},
             'postgresql', ' (and libpq parameters such as sslmode)')
    if 'dsn' in keys:
        raise ConfigurationError(
            f'{uri}: dsn cannot be given in a URI: the URI is the DSN')
    parts = _server(split)
    parts.update(libpq)
    dsn = ' '.join(f'{k}={_dsn_value(v)}' for k, v in parts.items())
    driver = keys.get('driver')
    pooler = keys.get('transaction_pooler')
    storage_options = _options(uri, options)

    def adapter():
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        return PostgreSQLAdapter(dsn=dsn, driver=driver,
                                 transaction_pooler=pooler)
    return _factory(adapter, storage_options, demo), dbkw


def resolve_mysql(uri):
    """``mysql://``."""
    split = urlsplit(uri)
    params = _query(uri, split)
    options, keys, dbkw, demo, rest = _split(params, 'mysql', uri)
    _unknown(uri, rest, 'mysql')
    for key in ('host', 'port', 'user', 'passwd', 'db'):
        if key in keys:
            raise ConfigurationError(
                f'{uri}: {key} belongs in the URI itself '
                f'(mysql://user:password@host:port/db)')
    names = {'password': 'passwd', 'dbname': 'db'}
    keys.update((names.get(key, key), value)
                for key, value in _server(split).items())
    storage_options = _options(uri, options)
    # The keys are checked now (convert_section names a bad one).
    from relstorage.adapters.mysql import MySQLAdapter
    MySQLAdapter(**keys)
    return _factory(lambda: MySQLAdapter(**keys), storage_options,
                    demo), dbkw


_PRAGMA = 'pragma_'


def resolve_sqlite(uri):
    """``sqlite:///path/to/data-dir`` (an absolute path: three slashes, as
    zodburi's file:// URIs write it), or ``sqlite://?data_dir=/path``, the
    form RelStorage 4 registers; the same query options follow either."""
    prefix = 'sqlite://'
    if not uri.startswith(prefix):
        raise ConfigurationError(f'{uri}: not a sqlite:// URI')
    path, _, query = uri[len(prefix):].partition('?')
    path = unquote(path)
    params = _query(uri, urlsplit('?' + query))
    given = params.pop('data_dir', None)
    if given is not None and path:
        raise ConfigurationError(
            f'{uri}: the data directory is given twice (in the path and as '
            f'data_dir): give one')
    path = path or (given or '').strip()
    if not path:
        raise ConfigurationError(
            f'{uri}: no data directory (sqlite:///path/to/directory or '
            f'sqlite://?data_dir=/path/to/directory)')
    pragmas = {k[len(_PRAGMA):]: v for k, v in params.items()
               if k.startswith(_PRAGMA)}
    params = {k: v for k, v in params.items() if not k.startswith(_PRAGMA)}
    options, keys, dbkw, demo, rest = _split(params, 'sqlite3', uri)
    _unknown(uri, rest, 'sqlite', ' (pragma_<name> for a pragma)')
    if 'gevent_yield_interval' in keys:
        raise ConfigurationError(
            f'{uri}: gevent_yield_interval (RelStorage 4) has no meaning '
            f'here')
    data_dir = os.path.normpath(path)
    storage_options = _options(uri, options)
    driver = keys.get('driver')

    def adapter():
        from relstorage.adapters.sqlite import SQLiteAdapter
        return SQLiteAdapter(data_dir=data_dir, driver=driver,
                             pragmas=pragmas)
    # The pragmas are checked now (names and values, as at start-up).
    from relstorage.adapters.sqlite.connection import check_pragmas
    from relstorage.adapters.sqlite.drivers import select_driver
    check_pragmas(select_driver(driver or 'auto'), pragmas)
    return _factory(adapter, storage_options, demo), dbkw
