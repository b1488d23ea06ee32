"""Round trips of a workload's phases: what crossed the relay between the
workload and its database server, read from the relay's control channel
(benchmarks/relay.py ``--control-port``) at the start and the end of each
phase.

Imported by the workload scripts (workload.py, floor.py,
blob_workload.py) under any interpreter: the standard library only.  A
workload given ``--relay-control HOST:PORT`` (run.py ``--round-trips`` or
``--rtt``) records in each phase's dict::

    'relay': {'counts': {'round_trips': 60, 'client_messages': ...},
              'operations': {'object': 2000, 'commit': 20}}

the differences of the relay's counts over the phase and the phase's
operations by unit, for the harness to divide (harness/roundtrips.py).
Without it nothing is read and nothing is added.

The counts are the relay's, for all its connections: a phase's figure is
its process's only while nothing else uses the relay, as in run.py, whose
sides take turns.  Processes that share a phase record the counts at both
ends (``span``) and wait for one another before going on, so that the
harness takes the whole phase from the first start to the last end.
"""
import json
import socket


def read_counts(address, timeout=10.0):
    """The relay's counts so far (a dict: round_trips, client_messages,
    server_messages, client_bytes, server_bytes, connections) from its
    control channel at ``address`` (``HOST:PORT``), which answers a
    connection with one line of JSON and closes it.  OSError when it does
    not answer."""
    host, _, port = address.rpartition(':')
    with socket.create_connection((host or '127.0.0.1', int(port)),
                                  timeout) as sock:
        data = b''
        while not data.endswith(b'\n'):
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return json.loads(data)


class RoundTrips:
    """The counts of one workload process's phases (``address``: the
    relay's control channel, or None: nothing is counted)."""

    def __init__(self, address=None):
        self.address = address

    @property
    def counting(self):
        return bool(self.address)

    def mark(self):
        """The counts now (None when not counting): take it just before a
        phase's timing starts."""
        return read_counts(self.address) if self.address else None

    def record(self, phase, mark, span=False, **operations):
        """``phase`` (a phase's dict) with ``relay`` added: the counts since
        ``mark`` and the phase's ``operations`` by unit (``object=2000,
        commit=20``); with ``span``, the counts at both ends as well
        (``[start, end]``).  ``phase`` as it was when not counting."""
        if mark is None:
            return phase
        end = read_counts(self.address)
        relay = {'counts': {key: end[key] - mark[key] for key in end},
                 'operations': operations}
        if span:
            relay['span'] = [mark, end]
        phase['relay'] = relay
        return phase
