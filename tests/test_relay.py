"""The round-trip relay of the benchmarks (benchmarks/harness/relay.py):
it counts one round trip per query and adds the latency it is told to; run
as the benchmarks run it (benchmarks/relay.py, a process of its own), its
control channel answers the same counts."""
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from backends import PG_DSN

pytestmark = pytest.mark.postgresql

_BENCHMARKS = os.path.join(os.path.dirname(__file__), '..', 'benchmarks')
_PATH = os.path.join(_BENCHMARKS, 'harness', 'relay.py')
_SCRIPT = os.path.join(_BENCHMARKS, 'relay.py')


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


def _control(port):
    """The counts the control channel answers: one line of JSON, then the
    end of the connection."""
    with socket.create_connection(('127.0.0.1', port), 10) as sock:
        data = b''
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    assert data.endswith(b'\n') and data.count(b'\n') == 1
    return json.loads(data)


def test_the_control_channel_answers_the_counts():
    psycopg2 = pytest.importorskip('psycopg2')
    host, port, keys = _server()
    queries = 25
    process = subprocess.Popen(
        [sys.executable, _SCRIPT, '--target', f'{host}:{port}',
         '--control-port', '0', '--stop-on-eof'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ready = json.loads(process.stdout.readline())
        conn = psycopg2.connect(host='127.0.0.1', port=ready['port'],
                                user=keys.get('user', 'root'),
                                dbname='postgres')
        try:
            conn.autocommit = True
            cursor = conn.cursor()
            before = _control(ready['control'])
            for _ in range(queries):
                cursor.execute('SELECT 1')
                assert cursor.fetchone() == (1,)
            after = _control(ready['control'])
        finally:
            conn.close()
    finally:
        # Closing its standard input stops it; it prints its last counts.
        out, _ = process.communicate(timeout=30)
    done = {key: after[key] - before[key] for key in after}
    assert done['round_trips'] == queries
    assert done['client_messages'] == done['server_messages'] == queries
    assert done['client_bytes'] > 0 and done['server_bytes'] > 0
    assert before['connections'] == after['connections'] == 1
    assert process.returncode == 0
    final = json.loads(out.strip().splitlines()[-1])
    assert final['connections'] == 1
    assert final['round_trips'] >= after['round_trips']
