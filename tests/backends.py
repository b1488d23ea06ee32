"""The databases the tests run against.

Each backend creates a fresh, empty database for every test that asks for
one and drops it afterwards.  Tests choose backends through the ``backend``
fixture (parametrized, one marker per database) and branch on the adapter's
capabilities, never on the backend's name.
"""
import shutil
import tempfile

from relstorage.storage import RelStorage


class SQLiteBackend:
    """SQLite needs no server: a database is a directory."""

    name = 'sqlite'

    def __init__(self):
        self._dirs = []

    def new_database(self):
        path = tempfile.mkdtemp(prefix='relstorage-sqlite-')
        self._dirs.append(path)
        return path

    def adapter(self, database, **adapter_options):
        from relstorage.adapters.sqlite import SQLiteAdapter
        return SQLiteAdapter(data_dir=database, **adapter_options)

    def open(self, database, **options):
        return RelStorage(self.adapter(database), **options)

    def zconfig(self, database, keep_history=True, **extra):
        """A ZConfig text opening ``database``."""
        lines = ''.join(f'    {k.replace("_", "-")} {v}\n'
                        for k, v in extra.items())
        return (
            '%import relstorage\n'
            '<relstorage>\n'
            f'    keep-history {"true" if keep_history else "false"}\n'
            f'{lines}'
            '    <sqlite3>\n'
            f'        data-dir {database}\n'
            '    </sqlite3>\n'
            '</relstorage>\n')

    def cleanup(self):
        for path in self._dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._dirs = []


BACKENDS = {
    'sqlite': SQLiteBackend,
}

