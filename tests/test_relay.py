"""The round-trip relay of the benchmarks (benchmarks/harness/relay.py):
it counts one round trip per query and adds the latency it is told to."""
import importlib.util
import os
import time

import pytest

from backends import PG_DSN

pytestmark = pytest.mark.postgresql

_PATH = os.path.join(os.path.dirname(__file__), '..', 'benchmarks',
                     'harness', 'relay.py')


def _relay_module():
    spec = importlib.util.spec_from_file_location('bench_relay', _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _server():
    keys = dict(part.split('=', 1) for part in PG_DSN.split())
    return keys.get('host', '127.0.0.1'), int(keys.get('port', 5432)), keys


@pytest.mark.parametrize('rtt', [0.0, 2.0])
def test_the_relay_counts_round_trips_and_adds_latency(rtt):
    psycopg2 = pytest.importorskip('psycopg2')
    relay_module = _relay_module()
    host, port, keys = _server()
    with relay_module.Relay((host, port), rtt=rtt) as relay:
        conn = psycopg2.connect(host='127.0.0.1', port=relay.port,
                                user=keys.get('user', 'root'),
                                dbname='postgres')
        try:
            conn.autocommit = True
            cursor = conn.cursor()
            before = relay.snapshot()
            started = time.perf_counter()
            for _ in range(20):
                cursor.execute('SELECT 1')
                assert cursor.fetchone() == (1,)
            elapsed = time.perf_counter() - started
            done = relay.snapshot() - before
        finally:
            conn.close()
    assert done.round_trips == 20
    assert done.client_messages == done.server_messages == 20
    assert done.client_bytes > 0 and done.server_bytes > 0
    assert relay.snapshot().connections == 1
    # Each round trip waited at least the added time.
    assert elapsed >= 20 * rtt / 1000.0
