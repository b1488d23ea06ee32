"""The soak: hours of the requests workload on one storage, per window of
time, to see whether anything decays (throughput, latency, memory,
sessions, transactions left open, the database's size).

    .venv/bin/python benchmarks/soak.py --backend postgresql --mode hp
        [--side ours|ref] [--minutes 60] [--window-minutes 5]
        [--processes 4] [--objects 20000] [--blobs 200] [--seed 1]

On a fresh database (``soak_<side>_<mode>``), soak_workload.py builds the
data set, then ``--processes`` workers (the side's interpreter: ours, or
RelStorage 4.3 from the reference venv, as in run.py) serve requests
until the time is up: random reads, a small write (a conflict now and
then), a small blob written or read every 50th request; blobs are kept
in the database (``shared-blob-dir false``, a cache directory per
process).  Meanwhile this process samples the server: its sessions on the
database and the database's size every 5 s, the longest a session has
been idle inside a transaction every 0.5 s.

Per window it prints the requests per second, the p50 and p99 latency
of a request, each worker's RSS at the window's end, the most sessions,
the longest idle-in-transaction time and the size; then the checks: the
last window's throughput at least 95 % of the second's, no worker's RSS
grown by 10 % or more after the first 10 minutes, no session idle in a
transaction for more than 1 s.  Results go to
``benchmarks/results/soak-<side>-<backend>-<mode>.json`` (``--json``).
A run stopped with Ctrl-C reports the windows it finished.
"""
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness.backends import MODES
from harness.backends import TITLES
from harness.backends import database_for
from harness.backends import relstorage_section
from harness.cli import Parser
from harness.environment import environment
from harness.environment import finish
from harness.procs import server_cpu_seconds
from harness.report import heading
from harness.report import log
from harness.report import render
from harness.report import show
from harness.report import write_results
from harness.sides import Side
from harness.sides import prepare

HERE = Path(__file__).resolve().parent
SOAK = HERE / 'soak_workload.py'
WORKLOAD = HERE / 'workload.py'

#: The server's own gauges, sampled with the size (their largest per
#: window is reported): how far behind the server is in cleaning up old
#: row versions (MariaDB's undo history not yet purged, PostgreSQL's dead
#: rows not yet vacuumed), and on MariaDB how much of the redo log is
#: waiting for a checkpoint and how many buffer-pool pages are dirty.
SERVER_GAUGES = ('purge_backlog', 'checkpoint_age_mb', 'dirty_pages')

#: soak_workload.py's histogram (FLOOR * STEP**i seconds, bucket i).
FLOOR, STEP = 0.0001, 1.05


class Sampler:
    """The server's view of one database, sampled on a connection of its
    own (not among the sessions counted)."""

    def __init__(self, database, backend, name):
        self.samples = []
        self._stop = threading.Event()
        if backend == 'postgresql':
            conn = database.psycopg2.connect(database.dsn('postgres'))
            conn.autocommit = True
            self._sessions = ('SELECT COUNT(*) FROM pg_stat_activity '
                              'WHERE datname = %s')
            self._idle = ("SELECT COALESCE(MAX(EXTRACT(EPOCH FROM "
                          "clock_timestamp() - state_change)), 0) "
                          "FROM pg_stat_activity WHERE datname = %s "
                          "AND state = 'idle in transaction'")
            self._size = 'SELECT pg_database_size(%s)'
        else:
            conn = database.MySQLdb.connect(
                host=database.host, port=database.port, user=database.user,
                passwd=database.passwd, autocommit=True)
            self._sessions = ('SELECT COUNT(*) FROM '
                              'information_schema.processlist WHERE db = %s')
            # A session in Sleep with a transaction open is idle in it;
            # TIME_MS (MariaDB) is how long it has slept.
            self._idle = (
                'SELECT COALESCE(MAX(p.time_ms), 0) / 1000 '
                'FROM information_schema.innodb_trx t '
                'JOIN information_schema.processlist p '
                '  ON p.id = t.trx_mysql_thread_id '
                "WHERE p.db = %s AND p.command = 'Sleep'")
            self._size = ('SELECT SUM(data_length + index_length) '
                          'FROM information_schema.tables '
                          'WHERE table_schema = %s')
        self._conn = conn
        self._database, self._backend = database, backend
        self._name = name
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _value(self, cursor, sql):
        cursor.execute(sql, (self._name,))
        value = cursor.fetchone()[0]
        return float(value or 0)

    def _run(self):
        cursor = self._conn.cursor()
        turn = 0
        while not self._stop.is_set():
            sample = {'time': time.time(),
                      'idle_in_transaction': self._value(cursor, self._idle)}
            if turn % 10 == 0:
                sample['sessions'] = int(self._value(cursor, self._sessions))
                sample['size'] = int(self._value(cursor, self._size))
                sample.update(self._gauges(cursor))
                sample['server_cpu_s'] = server_cpu_seconds()
                sample['machine_busy_s'] = machine_busy()
            self.samples.append(sample)
            turn += 1
            self._stop.wait(0.5)

    def _gauges(self, cursor):
        # (The harness's queries: on PostgreSQL a connection of its own to
        # the database, closed before the sessions are counted again.)
        if self._backend == 'postgresql':
            return {'purge_backlog': self._database.dead_rows(self._name)}
        history, dirty, _ = self._database.background_work()
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_checkpoint_age'")
        row = cursor.fetchone()
        return {'purge_backlog': history, 'dirty_pages': dirty,
                'checkpoint_age_mb': round(
                    int(row[1]) / 2 ** 20 if row else 0, 1)}

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        self._conn.close()
        return self.samples


def percentile(histogram, fraction):
    """The upper bound (seconds) of the bucket holding ``fraction`` of the
    requests."""
    total = sum(histogram)
    if not total:
        return None
    wanted = fraction * total
    seen = 0
    for index, count in enumerate(histogram):
        seen += count
        if seen >= wanted:
            return FLOOR * STEP ** index
    return FLOOR * STEP ** (len(histogram) - 1)


def machine_busy():
    """CPU seconds the whole machine has been busy (all CPUs, Linux's
    /proc/stat: what is neither idle nor waiting for I/O)."""
    ticks = [int(field) for field in
             Path('/proc/stat').read_text().split('\n', 1)[0].split()[1:9]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return round(busy / os.sysconf('SC_CLK_TCK'), 2)


def windows_of(paths, samples, start, window):
    """Per window index: the workers' records merged, the samples of
    its span."""
    found = {}
    for worker, path in enumerate(paths):
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            record = json.loads(line)
            entry = found.setdefault(record['window'], {
                'requests': 0, 'conflicts': 0, 'histogram': None,
                'rss_kb': {}, 'cpu_s': {}, 'storage': {},
                'worker_conflicts': {}, 'kinds': {}, 'most_retries': 0,
                'samples': []})
            entry['requests'] += record['requests']
            entry['conflicts'] += record['conflicts']
            entry['worker_conflicts'][worker] = record['conflicts']
            # (Older records, and the reference side's, may lack these.)
            for kind, count in record.get('kinds', {}).items():
                entry['kinds'][kind] = entry['kinds'].get(kind, 0) + count
            entry['most_retries'] = max(entry['most_retries'],
                                        record.get('most_retries', 0))
            entry['samples'].extend(dict(sample, worker=worker)
                                    for sample in record.get('samples', ()))
            entry['rss_kb'][worker] = record['rss_kb']
            entry['cpu_s'][worker] = record.get('cpu_s')
            for key, value in record.get('storage', {}).items():
                entry['storage'][key] = entry['storage'].get(key, 0) + value
            if entry['histogram'] is None:
                entry['histogram'] = list(record['histogram'])
            else:
                entry['histogram'] = [a + b for a, b in zip(
                    entry['histogram'], record['histogram'])]
    out = []
    for index in sorted(found):
        entry = found[index]
        begin, end = start + index * window, start + (index + 1) * window
        span = [s for s in samples if begin <= s['time'] < end]
        sized = [s for s in span if 'sessions' in s]
        out.append({
            'window': index, 'seconds': window,
            'requests': entry['requests'],
            'rate': entry['requests'] / window,
            'conflicts': entry['conflicts'],
            'conflicts_per_worker': [entry['worker_conflicts'][w]
                                     for w in sorted(entry['worker_conflicts'])],
            'conflict_kinds': entry['kinds'],
            'most_retries': entry['most_retries'],
            'conflict_samples': sorted(entry['samples'],
                                       key=lambda s: s['time']),
            'server': {key: max(s[key] for s in sized if key in s)
                       for key in SERVER_GAUGES
                       if any(key in s for s in sized)},
            'p50': percentile(entry['histogram'], 0.5),
            'p99': percentile(entry['histogram'], 0.99),
            'rss_kb': [entry['rss_kb'][w] for w in sorted(entry['rss_kb'])],
            'sessions': max((s['sessions'] for s in sized), default=None),
            'idle_in_transaction': max(
                (s['idle_in_transaction'] for s in span), default=None),
            'size': sized[-1]['size'] if sized else None,
            'client_cpu_s': sum(v or 0 for v in entry['cpu_s'].values()),
            'server_cpu_s': sized[-1].get('server_cpu_s') if sized else None,
            'machine_busy_s': (sized[-1].get('machine_busy_s')
                               if sized else None),
            'storage': entry['storage'],
        })
    # CPU per request within each window, the client's (all workers) and
    # the server's: which side a change in throughput comes from.
    client, server, machine, before = 0.0, None, None, {}
    for w in out:
        # What the rest of the machine used meanwhile (this harness, and
        # anything else running): the check that the run had it alone.
        if None not in (w['machine_busy_s'], machine, w['server_cpu_s'],
                        server):
            w['other_cpu_s'] = round(
                (w['machine_busy_s'] - machine)
                - (w['client_cpu_s'] - client)
                - (w['server_cpu_s'] - server), 1)
        else:
            w['other_cpu_s'] = None
        machine = w['machine_busy_s']
        # The storage's counters (all workers) within the window.
        now = w.pop('storage')
        w['storage'] = {key: round(value - before.get(key, 0), 3)
                        for key, value in now.items()}
        before = now
        n = w['requests'] or 1
        w['client_cpu_ms'] = round((w['client_cpu_s'] - client) * 1000 / n, 3)
        client = w['client_cpu_s']
        if w['server_cpu_s'] is not None and server is not None:
            w['server_cpu_ms'] = round(
                (w['server_cpu_s'] - server) * 1000 / n, 3)
        else:
            w['server_cpu_ms'] = None
        server = w['server_cpu_s']
    return out


def conflict_story(windows):
    """Lines telling the conflicts of any window with several times the
    usual number: of what kind, which workers, the longest streak of
    retries, and the conflicts recorded in full."""
    counts = sorted(w['conflicts'] for w in windows)
    usual = counts[len(counts) // 2] if counts else 0
    lines = []
    for w in windows:
        if w['conflicts'] <= max(3 * usual, 10):
            continue
        lines.append(f"Window {w['window'] + 1}: {w['conflicts']} conflicts "
                     f'(usual {usual}), per worker '
                     f"{w['conflicts_per_worker']}, most retries of one "
                     f"request {w['most_retries']}.")
        for kind, count in sorted(w['conflict_kinds'].items(),
                                  key=lambda item: -item[1]):
            lines.append(f'  {count:6d}  {kind}')
        for sample in w['conflict_samples']:
            lines.append(f"  worker {sample['worker']} retry "
                         f"{sample['retry']}: {sample['message']}")
        lines.append('')
    return lines


def checks(windows, window, complete):
    """The soak's three checks, ``[(name, ok, detail)]`` (ok None: not
    enough windows)."""
    out = []
    if complete and len(windows) >= 3:
        second, last = windows[1]['rate'], windows[-1]['rate']
        out.append(('throughput holds (last window >= 95 % of the second)',
                    last >= 0.95 * second,
                    f'{last:.1f} against {second:.1f} req/s '
                    f'({last / second:.2f})'))
    else:
        out.append(('throughput holds', None, 'fewer than 3 windows'))
    after = int(600 // window) - 1
    if complete and 0 <= after < len(windows) - 1:
        base, end = windows[after]['rss_kb'], windows[-1]['rss_kb']
        growth = max(e / b - 1 for b, e in zip(base, end))
        out.append(('RSS grows < 10 % after 10 minutes', growth < 0.10,
                    f'most {growth:+.1%} (per worker, MB: ' + ', '.join(
                        f'{b / 1024:.0f}->{e / 1024:.0f}'
                        for b, e in zip(base, end)) + ')'))
    else:
        out.append(('RSS after 10 minutes', None, 'run shorter than that'))
    idle = max((w['idle_in_transaction'] or 0 for w in windows), default=0)
    out.append(('no session idle in a transaction > 1 s', idle <= 1.0,
                f'longest {idle:.2f} s'))
    return out


def main(argv=None):
    parser = Parser(__doc__.splitlines()[0])
    parser.add_argument('--backend', choices=('postgresql', 'mysql'),
                        required=True)
    parser.add_argument('--mode', choices=tuple(MODES), required=True)
    parser.add_argument('--side', choices=('ours', 'ref'), default='ours')
    parser.add_argument('--minutes', type=float, default=60)
    parser.add_argument('--window-minutes', type=float, default=5)
    parser.add_argument('--processes', type=int, default=4)
    parser.add_argument('--objects', type=int, default=20000)
    parser.add_argument('--blobs', type=int, default=200)
    parser.add_argument('--seed', type=int, default=1)
    parser.servers(sqlite_synchronous=False)
    parser.results('soak.json', keep_data=False)
    args = parser.parse(argv)
    if args.json is None or args.json.endswith('/soak.json'):
        args.json = str(Path(args.json or HERE / 'results' / 'soak.json')
                        .with_name(f'soak-{args.side}-{args.backend}-'
                                   f'{args.mode}.json'))
    backend, side_name = args.backend, args.side
    keep_history = MODES[args.mode][1]
    database = database_for(backend, args)
    probes = prepare((side_name,), WORKLOAD, log)
    env = environment({backend: database.server_version()}, probes,
                      side=side_name, minutes=args.minutes,
                      window_minutes=args.window_minutes,
                      processes=args.processes, objects=args.objects,
                      blobs=args.blobs, seed=args.seed)
    side = Side(side_name, backend, SOAK)
    name = f'soak_{side_name}_{args.mode}'
    window = args.window_minutes * 60
    database.create(name)
    tmp = Path(tempfile.mkdtemp(prefix='bench-soak-'))

    def zconfig(blob_dir):
        return '%import relstorage\n' + relstorage_section(
            database, side_name, name, keep_history,
            [f'blob-dir {blob_dir}', 'shared-blob-dir false'])
    samples, complete = [], False
    paths = [tmp / f'windows-{index}.jsonl'
             for index in range(args.processes)]
    try:
        log(f'{TITLES[backend]} {MODES[args.mode][0]}, {side.label}: '
            f'building {args.objects:,} objects and {args.blobs} blobs')
        side.run('soak-setup', '--zconfig', zconfig(tmp / 'blobs-setup'),
                 '--objects', args.objects, '--blobs', args.blobs,
                 timeout=3600)
        start = time.time() + 5
        until = start + args.minutes * 60
        sampler = Sampler(database, backend, name)
        children = [side.start(
            'soak-worker', '--zconfig', zconfig(tmp / f'blobs-{index}'),
            '--objects', args.objects, '--blobs', args.blobs,
            '--seed', args.seed * 1000 + index, '--start', start,
            '--until', until, '--window', window,
            '--windows', paths[index]) for index in range(args.processes)]
        log(f'{args.processes} workers for {args.minutes:g} minutes, '
            f'windows of {args.window_minutes:g}')
        try:
            for child in children:
                child.result(timeout=args.minutes * 60 + 600)
            complete = True
        except KeyboardInterrupt:
            log('stopped: reporting the windows finished')
            for child in children:
                child.kill()
        finally:
            samples = sampler.stop()
    finally:
        database.drop(name)
    windows = windows_of(paths, samples, start, window)
    # The workers' blob caches and window files, read now.
    shutil.rmtree(tmp, ignore_errors=True)
    if not complete:
        windows = windows[:-1]      # (the one under way)
    results = checks(windows, window, complete)
    rows = [(str(w['window'] + 1),
             f"{w['window'] * args.window_minutes:g}-"
             f"{(w['window'] + 1) * args.window_minutes:g} min",
             f"{w['rate']:.1f}", f"{w['conflicts']}",
             f"{w['p50'] * 1000:.1f}" if w['p50'] else '-',
             f"{w['p99'] * 1000:.1f}" if w['p99'] else '-',
             ' '.join(f'{r / 1024:.0f}' for r in w['rss_kb']),
             str(w['sessions'] if w['sessions'] is not None else '-'),
             f"{w['idle_in_transaction']:.2f}"
             if w['idle_in_transaction'] is not None else '-',
             f"{w['size'] / 2 ** 20:.0f}" if w['size'] else '-',
             str(w['server'].get('purge_backlog', '-')),
             str(w['server'].get('checkpoint_age_mb', '-')),
             f"{w['client_cpu_ms']:.2f}",
             f"{w['server_cpu_ms']:.2f}" if w['server_cpu_ms'] else '-',
             f"{w['other_cpu_s']:.1f}" if w.get('other_cpu_s') is not None
             else '-',
             f"{w['storage']['cache_misses'] / w['requests']:.2f}"
             if 'cache_misses' in w['storage'] and w['requests'] else '-')
            for w in windows]
    lines = heading(finish(env)) + [
        f'{TITLES[backend]}, {MODES[args.mode][0]}, {side.label}: '
        f'{args.processes} processes, {args.objects:,} objects, '
        f'{args.blobs} blobs, {args.minutes:g} minutes.', ''] + render(
        ('#', 'window', 'req/s', 'conflicts', 'p50 ms', 'p99 ms',
         'RSS MB (each worker)', 'sessions', 'idle in txn s', 'size MB',
         'purge backlog', 'checkpoint MB', 'client CPU ms/req',
         'server CPU ms/req', 'other CPU s', 'cache misses/req'),
        rows) + [''] + conflict_story(windows) + [
        f"{ {True: 'ok  ', False: 'MISS', None: 'n/a '}[ok]} {what}: "
        f'{detail}' for what, ok, detail in results]
    show(lines)
    write_results(args.json, {
        'environment': env, 'windows': windows, 'complete': complete,
        'checks': [{'check': what, 'ok': ok, 'detail': detail}
                   for what, ok, detail in results],
        'report': '\n'.join(lines)})
    return 0 if complete and all(ok is not False for _, ok, _ in results) \
        else 1


if __name__ == '__main__':
    sys.exit(main())
