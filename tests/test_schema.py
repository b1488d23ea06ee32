"""Schema creation: once, even when many clients open an empty database at
the same moment; and the schema_version row says what the database holds."""
import threading

import pytest

from relstorage.adapters.schema import SCHEMA_VERSION


def test_concurrent_first_opens_create_the_schema_once(backend, database,
                                                       keep_history):
    clients = 6
    barrier = threading.Barrier(clients)
    opened, errors = [], []

    def open_():
        try:
            barrier.wait(30)
            opened.append(backend.open(database, keep_history=keep_history))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=open_) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not errors, errors
        assert len(opened) == clients
        storage = opened[0]
        conn = storage._adapter.connmanager.connect()
        try:
            cursor = conn.cursor()
            cursor.execute('SELECT version, keep_history FROM schema_version')
            rows = cursor.fetchall()
        finally:
            storage._adapter.connmanager.close(conn, cursor)
        assert [(v, bool(k)) for v, k in rows] == [
            (SCHEMA_VERSION, keep_history)]
        # Every client can use it.
        oids = {s.new_oid() for s in opened}
        assert len(oids) == clients
    finally:
        for storage in opened:
            storage.close()


def test_an_older_schema_is_refused_until_its_steps_are_applied(
        backend, database, keep_history):
    from relstorage import migrations
    from relstorage.adapters.schema import ddl_statements
    from relstorage.errors import SchemaError
    from relstorage.config.options import Options
    # A database at version 1, as the first relstorage made it.
    adapter = backend.adapter(database)
    adapter.configure(Options(keep_history=keep_history))
    schema = adapter.schema
    cm = adapter.connmanager

    def run(statements):
        conn = cm.connect()
        cursor = conn.cursor()
        try:
            with schema._creating(conn, cursor):
                for stmt in statements:
                    cursor.execute(stmt)
        finally:
            cm.close(conn, cursor)

    run(ddl_statements(schema.DDL_DIR, keep_history))
    with pytest.raises(SchemaError) as info:
        backend.open(database, keep_history=keep_history)
    message = str(info.value)
    step = migrations.steps(1, SCHEMA_VERSION)[0]
    assert 'version 1' in message and f'version {SCHEMA_VERSION}' in message
    assert step.relative_path(schema.DATABASE, keep_history) in message
    # The administrator applies the steps; then it opens and works.
    for step in migrations.steps(1, SCHEMA_VERSION):
        run(schema.step_statements(step))
    storage = backend.open(database, keep_history=keep_history)
    try:
        storage.new_oid()
    finally:
        storage.close()


def test_a_newer_schema_is_refused(backend, database, keep_history):
    from relstorage.errors import SchemaError
    storage = backend.open(database, keep_history=keep_history)
    storage.close()
    cm = storage._adapter.connmanager
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        cm.begin_write(cursor, 'test')
        cursor.execute('UPDATE schema_version SET version = %d'
                       % (SCHEMA_VERSION + 1))
        cm.commit(conn, cursor)
    finally:
        cm.close(conn, cursor)
    with pytest.raises(SchemaError, match='newer.*upgrade relstorage'):
        backend.open(database, keep_history=keep_history)
