"""Configuration: ZConfig and the Python API accept the same options, and a
bad value fails at start-up naming the key and the value."""
import os
import sys

import pytest
import ZConfig
import ZODB.config

from relstorage.errors import ConfigurationError
from relstorage.errors import SchemaError
from relstorage.options import Options
from relstorage.options import section_keys


def _open(text):
    return ZODB.config.storageFromString(text)


def _zconfig(database, relstorage_lines='', sqlite_lines=''):
    return (
        '%import relstorage\n'
        f'<relstorage>\n{relstorage_lines}\n'
        f'  <sqlite3>\n    data-dir {database}\n{sqlite_lines}\n'
        '  </sqlite3>\n'
        '</relstorage>\n')


def test_defaults_come_from_component_xml():
    keys = section_keys('relstorage')
    options = Options()
    assert options.keep_history is True
    assert options.commit_lock_timeout == float(
        keys['commit-lock-timeout'][1])
    assert options.read_only is False
    assert options.create_schema is True


def test_python_api_rejects_unknown_and_bad_options():
    with pytest.raises(ConfigurationError, match='unknown relstorage option'):
        Options(keep_histroy=False)
    with pytest.raises(ConfigurationError,
                       match="commit-lock-timeout: 'soon'"):
        Options(commit_lock_timeout='soon')
    with pytest.raises(ConfigurationError, match="keep-history: 'maybe'"):
        Options(keep_history='maybe')


@pytest.mark.sqlite
def test_zconfig_opens_with_options(tmp_path):
    storage = _open(_zconfig(
        tmp_path, 'keep-history false\n  name my-db\n'
        '  commit-lock-timeout 7.5',
        '    <pragmas>\n      cache_size -2000\n    </pragmas>'))
    try:
        assert storage.getName() == 'my-db'
        assert not storage.supportsUndo()
        assert storage._options.commit_lock_timeout == 7.5
        assert storage._adapter.pragmas == {'cache_size': '-2000'}
    finally:
        storage.close()


@pytest.mark.sqlite
@pytest.mark.parametrize('relstorage_lines, sqlite_lines, words', [
    ('commit-lock-timeout soon', '', ['commit-lock-timeout', "'soon'"]),
    ('keep-history perhaps', '', ['keep-history', "'perhaps'"]),
    ('', '    driver oracle', ['driver', "'oracle'"]),
    ('', '    <pragmas>\n      no_such_pragma 1\n    </pragmas>',
     ['no_such_pragma']),
    ('', '    <pragmas>\n      cache_size 1;drop\n    </pragmas>',
     ['cache_size', '1;drop']),
    ('colour blue', '', ['colour']),
])
def test_bad_zconfig_values_name_key_and_value(
        tmp_path, relstorage_lines, sqlite_lines, words):
    with pytest.raises((ZConfig.ConfigurationError, ConfigurationError)) as e:
        _open(_zconfig(tmp_path, relstorage_lines, sqlite_lines))
    for word in words:
        assert word in str(e.value)


@pytest.mark.sqlite
def test_data_dir_that_is_a_file(tmp_path):
    path = tmp_path / 'file'
    path.write_text('x')
    with pytest.raises(ZConfig.ConfigurationError) as e:
        _open(_zconfig(path))
    assert 'data-dir' in str(e.value) and 'not a directory' in str(e.value)


def test_other_history_mode_is_refused(backend, database):
    backend.open(database, keep_history=True).close()
    with pytest.raises(SchemaError, match='keep-history is false'):
        backend.open(database, keep_history=False)


def test_missing_schema_without_create_schema(backend, database):
    with pytest.raises(SchemaError, match='create-schema'):
        backend.open(database, create_schema=False)


@pytest.mark.sqlite
def test_database_file_location(tmp_path):
    storage = _open(_zconfig(tmp_path / 'new' / 'dir'))
    try:
        assert os.path.exists(tmp_path / 'new' / 'dir' / 'relstorage.sqlite3')
    finally:
        storage.close()


@pytest.mark.postgresql
@pytest.mark.parametrize('driver, module, package', [
    ('psycopg2', 'psycopg2', 'psycopg2-binary'),
    ('psycopg', 'psycopg', 'psycopg[binary]'),
])
def test_missing_postgresql_driver_names_the_package(
        monkeypatch, driver, module, package):
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    monkeypatch.setitem(sys.modules, module, None)   # import fails
    with pytest.raises(ConfigurationError) as e:
        PostgreSQLAdapter(dsn='dbname=x', driver=driver)
    assert 'driver' in str(e.value) and package in str(e.value)


@pytest.mark.postgresql
def test_postgresql_password_never_shown(caplog):
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    from relstorage.storage import RelStorage
    secret = 'pa55-s3cret'
    adapter = PostgreSQLAdapter(
        dsn=f'host=127.0.0.1 port=1 user=zope password={secret} dbname=z',
        driver='psycopg2')
    assert secret not in repr(adapter) + adapter.describe()
    with pytest.raises(Exception) as e:
        RelStorage(adapter)          # nothing listens on port 1
    text = str(e.value) + repr(e.value) + caplog.text
    assert 'port=1' in text and secret not in text
    cause = e.value.__cause__ or e.value.__context__
    assert cause is None or secret not in str(cause)
