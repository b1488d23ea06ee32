"""Schema creation: once, even when many clients open an empty database at
the same moment; and the schema_version row says what the database holds."""
import threading

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
