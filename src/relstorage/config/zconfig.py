"""ZConfig factories for ``%import relstorage`` (see component.xml)."""
import logging

from ZODB.config import BaseConfig

from relstorage.config.options import Options

log = logging.getLogger(__name__)


class RelStorageFactory(BaseConfig):
    """The datatype of the ``<relstorage>`` section."""

    def open(self):
        from relstorage.storage import RelStorage
        config = self.config
        adapter = config.adapter.create()
        return RelStorage(adapter, options=Options.from_section(config))


class SQLite3AdapterFactory:
    """The datatype of the ``<sqlite3>`` section."""

    def __init__(self, config):
        self.config = config

    def create(self):
        from relstorage.adapters.sqlite import SQLiteAdapter
        config = self.config
        if config.gevent_yield_interval is not None:
            log.warning('sqlite3 option gevent_yield_interval (RelStorage '
                        '4) is ignored: relstorage runs on threads, and '
                        'SQLite statements do not yield to gevent')
        pragmas = config.pragmas.pragmas if config.pragmas else {}
        return SQLiteAdapter(
            data_dir=config.data_dir, driver=config.driver, pragmas=pragmas)


class PostgreSQLAdapterFactory:
    """The datatype of the ``<postgresql>`` section."""

    def __init__(self, config):
        self.config = config

    def create(self):
        from relstorage.adapters.postgresql import PostgreSQLAdapter
        return PostgreSQLAdapter(
            dsn=self.config.dsn, driver=self.config.driver,
            transaction_pooler=self.config.transaction_pooler)


class MySQLAdapterFactory:
    """The datatype of the ``<mysql>`` section."""

    def __init__(self, config):
        self.config = config

    def create(self):
        from relstorage.adapters.mysql import MySQLAdapter
        from relstorage.adapters.mysql.adapter import CONNECT_KEYS
        keys = {k: getattr(self.config, k) for k in CONNECT_KEYS}
        return MySQLAdapter(driver=self.config.driver, **keys)


class OracleAdapterFactory:
    """The datatype of the ``<oracle>`` section."""

    def __init__(self, config):
        self.config = config

    def create(self):
        from relstorage.adapters.oracle import OracleAdapter
        config = self.config
        return OracleAdapter(user=config.user, password=config.password,
                             dsn=config.dsn, driver=config.driver)
