"""relstorage through zodburi: each scheme resolved by zodburi itself (the
entry points of setup.py), written through the URI and read back through
the equivalent <relstorage> configuration."""
from urllib.parse import quote

import pytest
import transaction
import ZODB
import ZODB.config
import zodburi
from ZODB.DemoStorage import DemoStorage

from backends import MYSQL_HOST
from backends import MYSQL_USER
from relstorage.config.options import ConfigurationError
from relstorage.storage import RelStorage


def _dsn_keys(dsn):
    return dict(part.split('=', 1) for part in dsn.split())


def _uri(backend, database, query=''):
    """A URI of ``backend``'s ``database``, with ``query``."""
    if backend.name == 'sqlite':
        base = f'sqlite://{quote(database)}'
        driver = ''
    elif backend.name.startswith('postgresql'):
        keys = _dsn_keys(database)
        netloc = quote(keys.get('user', ''))
        if keys.get('password'):
            netloc += ':' + quote(keys['password'])
        netloc += '@' + keys.get('host', 'localhost')
        if keys.get('port'):
            netloc += ':' + keys['port']
        base = f'postgresql://{netloc}/{keys["dbname"]}'
        driver = f'driver={backend.driver}'
    else:
        base = f'mysql://{quote(MYSQL_USER)}@{MYSQL_HOST}/{database}'
        driver = f'driver={backend.driver}'
    parts = [p for p in (driver, query) if p]
    return base + ('?' + '&'.join(parts) if parts else '')


def _read_through_config(backend, database, keep_history):
    storage = ZODB.config.storageFromString(
        backend.zconfig(database, keep_history))
    db = ZODB.DB(storage)
    try:
        conn = db.open()
        return dict(conn.root()['written'])
    finally:
        db.close()


def test_write_through_a_uri_read_through_the_config(backend, database):
    uri = _uri(backend, database, 'keep_history=false&cache-local-mb=5'
                                  '&database_name=main'
                                  '&connection_cache_size=1234')
    factory, dbkw = zodburi.resolve_uri(uri)
    assert dbkw['database_name'] == 'main'
    assert dbkw['cache_size'] == 1234
    storage = factory()
    assert isinstance(storage, RelStorage)
    assert storage._options.keep_history is False
    assert storage._options.cache_local_mb == 5
    db = ZODB.DB(storage, **dbkw)
    try:
        conn = db.open()
        conn.root()['written'] = {'through': 'a URI'}
        transaction.commit()
        conn.close()
    finally:
        db.close()
    assert _read_through_config(backend, database, False) == {
        'through': 'a URI'}


def test_both_postgresql_schemes(backend, database):
    if not backend.name.startswith('postgresql'):
        pytest.skip('PostgreSQL only')
    for scheme in ('postgres', 'postgresql'):
        uri = _uri(backend, database, 'application_name=uri-test')
        uri = scheme + uri[len('postgresql'):]
        factory, _ = zodburi.resolve_uri(uri)
        storage = factory()
        try:
            assert 'application_name=uri-test' in storage._adapter._dsn
        finally:
            storage.close()


def test_demostorage_keeps_writes_away_from_the_database(backend, database):
    factory, dbkw = zodburi.resolve_uri(
        _uri(backend, database, 'demostorage=true'))
    storage = factory()
    assert isinstance(storage, DemoStorage)
    assert isinstance(storage.base, RelStorage)
    db = ZODB.DB(storage)
    try:
        conn = db.open()
        conn.root()['written'] = {'only': 'in memory'}
        transaction.commit()
        conn.close()
    finally:
        db.close()
    plain = ZODB.config.storageFromString(backend.zconfig(database, True))
    db = ZODB.DB(plain)
    try:
        assert 'written' not in db.open().root()
    finally:
        db.close()


@pytest.mark.parametrize('query, named', [
    ('no_such_option=1', 'no_such_option'),
    ('keep_history=perhaps', 'keep-history'),
    ('cache_local_mb=lots', 'cache-local-mb'),
    ('demostorage=maybe', 'demostorage'),
])
def test_a_bad_option_is_named(backend, database, query, named):
    with pytest.raises(ConfigurationError, match=named):
        zodburi.resolve_uri(_uri(backend, database, query))


def test_database_keys_in_the_query(backend, database, tmp_path):
    if backend.name == 'sqlite':
        factory, _ = zodburi.resolve_uri(
            _uri(backend, database, 'pragma_synchronous=normal'))
        storage = factory()
        try:
            assert storage._adapter.pragmas['synchronous'] == 'normal'
        finally:
            storage.close()
        with pytest.raises(ConfigurationError, match='no_such_pragma'):
            zodburi.resolve_uri(_uri(backend, database,
                                     'pragma_no_such_pragma=1'))
    elif backend.name.startswith('mysql'):
        factory, _ = zodburi.resolve_uri(
            _uri(backend, database, 'connect_timeout=7'))
        storage = factory()
        try:
            assert storage._adapter._params['connect_timeout'] == 7
        finally:
            storage.close()
        with pytest.raises(ConfigurationError, match='connect_timeout'):
            zodburi.resolve_uri(_uri(backend, database,
                                     'connect_timeout=soon'))
    else:
        with pytest.raises(ConfigurationError, match='dsn'):
            zodburi.resolve_uri(_uri(backend, database, 'dsn=x'))


@pytest.mark.sqlite
@pytest.mark.parametrize('form', ['path', 'data_dir', 'data-dir'])
def test_both_sqlite_forms_take_the_same_options(tmp_path, form):
    """``sqlite:///path`` and RelStorage 4's ``sqlite://?data_dir=/path``
    name the same database, with the same query options after either."""
    directory = tmp_path / 'zodb dir'
    query = ('keep_history=false&cache_local_mb=3&pragma_synchronous=normal'
             '&connection_cache_size=77')
    if form == 'path':
        uri = f'sqlite://{quote(str(directory))}?{query}'
    else:
        uri = f'sqlite://?{form}={quote(str(directory))}&{query}'
    factory, dbkw = zodburi.resolve_uri(uri)
    assert dbkw['cache_size'] == 77
    storage = factory()
    try:
        assert storage._options.keep_history is False
        assert storage._options.cache_local_mb == 3
        assert storage._adapter.pragmas['synchronous'] == 'normal'
        db = ZODB.DB(storage)
        conn = db.open()
        conn.root()['form'] = form
        transaction.commit()
        conn.close()
        db.close()
    finally:
        storage.close()
    assert (directory / 'relstorage.sqlite3').exists()
    storage = ZODB.config.storageFromString(
        '%import relstorage\n<relstorage>\n keep-history false\n'
        f' <sqlite3>\n  data-dir {directory}\n </sqlite3>\n</relstorage>\n')
    db = ZODB.DB(storage)
    try:
        assert db.open().root()['form'] == form
    finally:
        db.close()


@pytest.mark.sqlite
@pytest.mark.parametrize('uri, named', [
    ('sqlite://', 'no data directory'),
    ('sqlite://?data_dir=', 'no data directory'),
    ('sqlite://?keep_history=false', 'no data directory'),
    ('sqlite:///a/b?data_dir=/c/d', 'given twice'),
    ('sqlite://?data_dir=/a&data_dir=/b', 'given twice'),
])
def test_a_sqlite_uri_without_one_data_directory_is_refused(uri, named):
    with pytest.raises(ConfigurationError, match=named):
        zodburi.resolve_uri(uri)
