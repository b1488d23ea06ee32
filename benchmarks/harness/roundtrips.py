"""Round trips in the benchmarks (``--round-trips``, ``--rtt MS``): the
relay processes of a run, the databases routed through them, and the
figures per operation.

With either option a benchmark starts one relay (``benchmarks/relay.py``,
harness/relay.py's ``Relay``) per database server, each in a process of
its own so that its threads do not compete with the workload for the GIL,
and keeps it for the whole run.  ``Relays.route`` gives the database
object whose storages and floor connect to the relay
(``backends.PostgreSQL.through``: ``host=127.0.0.1 port=N`` in the dsn;
MariaDB: the ``host`` and ``port`` keys), ``Relays.control`` the address
of its control channel, which a workload is given as ``--relay-control``
(``sides.Side.relay_control``) and reads at the start and the end of each
of its phases (benchmarks/roundtrips.py).  A harness that times a whole
process (a console script) reads it itself before and after
(``Relays.counts``, ``difference``).

SQLite has no network; FileStorage and ZEO are not counted (ZEO's
protocol is not the database's): the benchmarks skip them with either
option and say so.
"""
import json
import statistics
import subprocess
import sys

from . import BENCH
from .venvs import clean_env

#: The backends with a network between the storage and the database.
NETWORKED = ('postgresql', 'mysql')
#: The counts a relay keeps (harness/relay.py's ``Counts``).
FIELDS = ('round_trips', 'client_messages', 'server_messages',
          'client_bytes', 'server_bytes', 'connections')


def networked_only(parser, args):
    """With ``--round-trips`` or ``--rtt``: keep only the backends with a
    network (``args.backends``) and list the others in ``args.skipped``
    (by title); an error if none is left."""
    from .backends import TITLES
    args.skipped = []
    if not args.round_trips:
        return
    args.skipped = [TITLES[b] for b in args.backends if b not in NETWORKED]
    args.backends = [b for b in args.backends if b in NETWORKED]
    if not args.backends:
        parser.error('--round-trips and --rtt need postgresql or mysql '
                     'in --backends')


def read_counts(address):
    """The counts of the relay whose control channel is ``address``."""
    import roundtrips     # benchmarks/, where the scripts run
    return roundtrips.read_counts(address)


class RelayProcess:
    """``benchmarks/relay.py`` in a process of its own in front of
    ``target`` (host, port), adding ``rtt`` milliseconds to every round
    trip: clients connect to ``127.0.0.1:port``; ``control`` (HOST:PORT)
    answers the counts.  It stops when its standard input is closed
    (``stop``, or this process's end)."""

    def __init__(self, target, rtt):
        host, port = target
        self.target = f'{host}:{port}'
        self.rtt = rtt
        self.process = subprocess.Popen(
            [sys.executable, str(BENCH / 'relay.py'), '--target',
             self.target, '--rtt', repr(float(rtt)), '--control-port', '0',
             '--stop-on-eof'],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=clean_env(), cwd=str(BENCH))
        line = self.process.stdout.readline()
        try:
            ready = json.loads(line)
        except ValueError:
            self.stop()
            raise RuntimeError(f'the relay to {self.target} did not start '
                               f'(it printed {line!r})')
        self.port = ready['port']
        self.control = f'127.0.0.1:{ready["control"]}'

    def counts(self):
        return read_counts(self.control)

    def stop(self):
        """Stop it; its last counts (None if it printed none)."""
        try:
            out, _ = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, _ = self.process.communicate()
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None


class Relays:
    """The relays of one run: none when ``rtt`` is None (neither
    ``--round-trips`` nor ``--rtt``), else one per server database and
    name, started when first routed to and stopped by ``stop``."""

    def __init__(self, rtt):
        self.rtt = rtt
        self.processes = {}
        self.final = {}

    @property
    def active(self):
        return self.rtt is not None

    def route(self, backend, database, name='main'):
        """``database`` routed through the relay ``(backend, name)``
        (started now if need be); ``database`` itself when not counting or
        on a backend without a network."""
        if not self.active or backend not in NETWORKED:
            return database
        key = (backend, name)
        if key not in self.processes:
            self.processes[key] = RelayProcess(database.server(), self.rtt)
        return database.through(self.processes[key].port)

    def control(self, backend, name='main'):
        """The control channel of the relay ``(backend, name)``, or None."""
        relay = self.processes.get((backend, name))
        return relay.control if relay else None

    def counts(self, backend, name='main'):
        """The counts so far of the relay ``(backend, name)``, or None."""
        relay = self.processes.get((backend, name))
        return relay.counts() if relay else None

    def stop(self):
        for key, relay in self.processes.items():
            self.final['/'.join(key)] = relay.stop()
        self.processes = {}

    def describe(self):
        """For the results document: the added latency and the relays'
        final counts."""
        return {'rtt_ms': self.rtt, 'final_counts': self.final}

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.stop()


def difference(start, end, **operations):
    """A phase's ``relay`` record from the counts at its two ends (see
    benchmarks/roundtrips.py); None when either is None."""
    if start is None or end is None:
        return None
    return {'counts': {key: end[key] - start[key] for key in FIELDS},
            'operations': operations}


def across_processes(parts):
    """The ``relay`` record of a phase several processes shared, each
    part recorded with its ``span``: the counts from the first start to
    the last end (the counts only grow, and the processes wait for one
    another at both ends), the operations added up.  None when a part
    has none."""
    relays = [part.get('relay') for part in parts]
    if not relays or None in relays:
        return None
    start = {key: min(r['span'][0][key] for r in relays) for key in FIELDS}
    end = {key: max(r['span'][1][key] for r in relays) for key in FIELDS}
    operations = {}
    for r in relays:
        for unit, count in r['operations'].items():
            operations[unit] = operations.get(unit, 0) + count
    return difference(start, end, **operations)


def per_operation(relay):
    """``{unit: round trips per operation}`` of one ``relay`` record
    (empty for None)."""
    if not relay:
        return {}
    trips = relay['counts']['round_trips']
    return {unit: trips / count
            for unit, count in relay['operations'].items() if count}


def medians(relays):
    """``{unit: the median of the round trips per operation}`` over the
    ``relay`` records of several runs of one phase (those without one
    left out); empty when none has one.  The runs of a phase cost the
    same round trips but for a poll or a retry more or less."""
    figures = {}
    for relay in relays:
        for unit, value in per_operation(relay).items():
            figures.setdefault(unit, []).append(value)
    return {unit: statistics.median(values)
            for unit, values in figures.items()}


def fmt(value):
    """A count per operation: three significant digits, at most."""
    if value is None:
        return '-'
    if value == 0:
        return '0'
    if value >= 100:
        return f'{value:,.0f}'
    if value >= 10:
        return f'{value:.1f}'
    if value >= 1:
        return f'{value:.2f}'
    return f'{value:.3f}'


def added_latency(rtt):
    """What the relay adds, for a report's sentence on it."""
    if rtt:
        return f'{rtt:g} ms to every round trip (the times include it)'
    return 'no latency (the times include its own cost)'


def skipped_note(skipped):
    """The report's line on what was not measured, or []."""
    if not skipped:
        return []
    return [f'Round trips: {", ".join(skipped)} skipped (no network between '
            f'the storage and its data, or not a database\'s protocol).']
