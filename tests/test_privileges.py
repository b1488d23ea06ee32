"""The least-privilege users of docs/postgresql.rst and docs/mysql.rst: a
DBA creates the schema, the application's user, with exactly the GRANT
statements the docs give, runs with create-schema false and does
everything an application and zodbpack do (commit, load, undo, blobs in
the database, pack)."""
import time
import uuid

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.blob import Blob
from ZODB.serialize import referencesf

from backends import MYSQL_HOST
from relstorage.adapters.mysql import MySQLAdapter
from relstorage.adapters.postgresql import PostgreSQLAdapter
from relstorage.storage import RelStorage

#: docs/postgresql.rst, "A user with fewer rights" ({db}, {user}).
PG_GRANTS = """
GRANT CONNECT, TEMPORARY ON DATABASE {db} TO {user};
GRANT USAGE ON SCHEMA public TO {user};
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE
    ON ALL TABLES IN SCHEMA public TO {user};
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {user};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {user};
"""

#: docs/mysql.rst, "A user with fewer rights" ({db}, {user}).
MYSQL_GRANTS = """
GRANT SELECT, INSERT, UPDATE, DELETE, DROP, CREATE TEMPORARY TABLES
    ON {db}.* TO {user};
GRANT PROCESS ON *.* TO {user};
"""


def _statements(text, **names):
    return [s.strip() for s in text.format(**names).split(';') if s.strip()]


def _exercise(adapter, tmp_path):
    """Open a storage on ``adapter`` with create-schema false and do what
    an application and zodbpack do."""
    storage = RelStorage(adapter, create_schema=False, keep_history=True,
                         blob_dir=str(tmp_path / 'blobs'),
                         shared_blob_dir=False)
    db = ZODB.DB(storage)
    try:
        conn = db.open()
        root = conn.root()
        for index in range(20):
            root[index] = PersistentMapping({'n': index})
        root['blob'] = blob = Blob()
        with blob.open('w') as f:
            f.write(b'blob data' * 1000)
        transaction.commit()
        root[0]['n'] = 'changed'
        transaction.commit()
        del root[1]
        transaction.commit()
        undo_id = storage.undoLog(0, 1)[0]['id']
        db.undo(undo_id)
        transaction.commit()
        conn.close()
        storage.pack(time.time() + 1, referencesf)
        db.cacheMinimize()
        conn = db.open()
        root = conn.root()
        assert root[0]['n'] == 'changed' and root[1]['n'] == 1
        with root['blob'].open() as f:
            assert f.read() == b'blob data' * 1000
        conn.close()
    finally:
        db.close()


def test_postgresql_least_privilege_user(backend, database, tmp_path):
    if not backend.name.startswith('postgresql'):
        pytest.skip('PostgreSQL only')
    backend.open(database, keep_history=True).close()   # the DBA's part
    user = 'rs_app_' + uuid.uuid4().hex[:10]
    dbname = database.rsplit('dbname=', 1)[1]
    import psycopg2
    admin = psycopg2.connect(database)
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE ROLE {user} LOGIN')
            for statement in _statements(PG_GRANTS, db=dbname, user=user):
                cursor.execute(statement)
        dsn = ' '.join(part for part in database.split()
                       if not part.startswith('user=')) + f' user={user}'
        _exercise(PostgreSQLAdapter(dsn=dsn, driver=backend.driver),
                  tmp_path)
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP OWNED BY {user}')
            cursor.execute(f'DROP ROLE {user}')
        admin.close()


def test_mysql_least_privilege_user(backend, database, tmp_path):
    if not backend.name.startswith('mysql'):
        pytest.skip('MySQL and MariaDB only')
    backend.open(database, keep_history=True).close()   # the DBA's part
    name = 'rs_app_' + uuid.uuid4().hex[:10]
    user = f"'{name}'@'%'"
    import pymysql
    admin = pymysql.connect(host=MYSQL_HOST, user='root', autocommit=True)
    try:
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE USER {user} IDENTIFIED BY 'secret'")
            for statement in _statements(MYSQL_GRANTS, db=database,
                                         user=user):
                cursor.execute(statement)
        _exercise(MySQLAdapter(host=MYSQL_HOST, user=name, passwd='secret',
                               db=database, driver=backend.driver),
                  tmp_path)
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP USER {user}')
        admin.close()
