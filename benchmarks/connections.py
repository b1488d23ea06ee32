"""The connections of a busy site: P processes of T threads, each thread
with a ZODB connection of its own serving requests, without a bound on
the database connections, with max-connections and (on PostgreSQL)
through PgBouncer in transaction mode, in one run.

    .venv/bin/python benchmarks/connections.py [--backends postgresql,mysql]
        [--processes 8] [--threads 8] [--requests 100]
        [--max-connections 4] [--objects 5000] [--reads 20] [--repeat 2]
        [--pool-size 20] [--variants unbounded,bounded,pgbouncer]

Per backend (history-free, a fresh database of --objects objects) and per
variant, the processes start together; each thread serves --requests
requests: it opens a ZODB connection, begins a transaction, reads --reads
objects chosen at random, changes an object of its own, commits and
closes the connection.  Meanwhile this process counts the server's
sessions on the database every 10 ms (pg_stat_activity,
information_schema.processlist).  It prints per variant the requests per
second (over the span from the first start to the last end, the best of
--repeat runs, the variants taking turns), the most sessions the server
saw, and the ratio of its rate to the unbounded one's, and writes the
figures to ``benchmarks/results/connections.json`` (``--json``).

The PgBouncer variant (harness/pgbouncer.py: Debian's program, a private
one on a free port, ``pool_mode = transaction``, ``--pool-size`` server
sessions) runs the clients without a bound and with
``transaction-pooler true``; the sessions counted are the bouncer's to
the server.

Every request must succeed (a MaxConnectionsError fails the run): the
bound is a bound, not a load shedder.
"""
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from harness import SRC
from harness.backends import database_for, relstorage_section
from harness.cli import Parser
from harness.environment import environment, finish
from harness.pgbouncer import Bouncer, Missing
from harness.report import heading, log, render, show, write_results

sys.path.insert(0, str(SRC))
HERE = Path(__file__).resolve().parent
BACKENDS = ('postgresql', 'mysql')
VARIANTS = ('unbounded', 'bounded', 'pgbouncer')


# -- the workers (this script, run as ``worker``) -------------------------

def populate(zconfig, objects, owners):
    import transaction
    import ZODB.config
    from BTrees.OOBTree import OOBTree
    from persistent.mapping import PersistentMapping
    db = ZODB.config.databaseFromString(zconfig)
    try:
        conn = db.open()
        root = conn.root()
        root['objects'] = tree = OOBTree()
        root['owned'] = owned = OOBTree()
        for index in range(objects):
            tree[index] = PersistentMapping(n=index, text='x' * 200)
            if index % 1000 == 999:
                transaction.commit()
        for owner in owners:
            owned[owner] = PersistentMapping(n=0)
        transaction.commit()
        conn.close()
    finally:
        db.close()


def worker(args):
    """One process: ``threads`` threads serving ``requests`` requests
    each, after the starting signal; prints its figures as JSON."""
    import transaction
    import ZODB.config
    db = ZODB.config.databaseFromString(args.zconfig)
    db.setPoolSize(args.threads)
    errors = []
    rng = random.Random(args.index)
    keys = [[rng.randrange(args.objects) for _ in range(args.reads)]
            for _ in range(args.requests * args.threads)]

    def serve(thread):
        owner = f'{args.index}-{thread}'
        picks = keys[thread::args.threads]
        try:
            for request in range(args.requests):
                tm = transaction.TransactionManager()
                conn = db.open(tm)
                try:
                    tm.begin()
                    root = conn.root()
                    tree = root['objects']
                    for key in picks[request]:
                        tree[key]['n']
                    root['owned'][owner]['n'] += 1
                    tm.commit()
                finally:
                    conn.close()
        except Exception as e:     # reported, and the run fails
            errors.append(f'{type(e).__name__}: {e}')
            traceback.print_exc()

    Path(args.barrier, f'ready-{args.index}').touch()
    go = Path(args.barrier, 'go')
    deadline = time.monotonic() + 300
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit('no starting signal within 300 s')
        time.sleep(0.005)
    start = time.time()
    threads = [threading.Thread(target=serve, args=(t,))
               for t in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    end = time.time()
    figures = db.storage.metrics()
    try:
        db.close()
    except Exception as e:     # reported with the requests' errors
        errors.append(f'closing the database: {type(e).__name__}: {e}')
    print(json.dumps({
        'start': start, 'end': end, 'requests': args.requests * args.threads,
        'errors': errors, 'connection_waits': figures['connection_waits'],
        'connection_wait_seconds': figures['connection_wait_seconds']}))


# -- the run ---------------------------------------------------------------

class Sessions:
    """Counts the server's sessions on one database every 10 ms, on a
    connection of its own (not counted: it is connected elsewhere)."""

    def __init__(self, database, backend, name):
        self.most = 0
        self._stop = threading.Event()
        if backend == 'postgresql':
            conn = database.psycopg2.connect(database.dsn('postgres'))
            conn.autocommit = True
            sql = ('SELECT COUNT(*) FROM pg_stat_activity '
                   'WHERE datname = %s')
        else:
            conn = database.MySQLdb.connect(
                host=database.host, port=database.port, user=database.user,
                passwd=database.passwd, autocommit=True)
            sql = ('SELECT COUNT(*) FROM information_schema.processlist '
                   'WHERE db = %s')
        self._conn = conn
        self._sql = sql
        self._name = name
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        cursor = self._conn.cursor()
        while not self._stop.is_set():
            cursor.execute(self._sql, (self._name,))
            self.most = max(self.most, cursor.fetchone()[0])
            time.sleep(0.01)

    def stop(self):
        self._stop.set()
        self._thread.join(10)
        self._conn.close()
        return self.most


def one_run(args, database, backend, name, zconfig, owners):
    """The processes of one variant, once: ``(rate, sessions, waits)``."""
    with tempfile.TemporaryDirectory(prefix='bench-connections-') as tmp:
        processes = [subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), 'worker',
             '--zconfig', zconfig, '--index', str(index),
             '--threads', str(args.threads), '--requests',
             str(args.requests), '--reads', str(args.reads), '--objects',
             str(args.objects), '--barrier', tmp],
            stdout=subprocess.PIPE, text=True, cwd=str(HERE))
            for index in range(args.processes)]
        deadline = time.monotonic() + 300
        while len(list(Path(tmp).glob('ready-*'))) < args.processes:
            if time.monotonic() > deadline or any(
                    p.poll() is not None for p in processes):
                for p in processes:
                    p.kill()
                raise SystemExit('the workers did not get ready')
            time.sleep(0.01)
        sessions = Sessions(database, backend, name)
        Path(tmp, 'go').touch()
        outputs = [p.communicate(timeout=1800)[0] for p in processes]
        most = sessions.stop()
    results = []
    for process, output in zip(processes, outputs):
        if process.returncode != 0:
            raise SystemExit(f'a worker exited with {process.returncode}')
        results.append(json.loads(output.strip().splitlines()[-1]))
    errors = [e for r in results for e in r['errors']]
    if errors:
        raise SystemExit(f'{len(errors)} requests failed, the first: '
                         f'{errors[0]}')
    span = max(r['end'] for r in results) - min(r['start'] for r in results)
    requests = sum(r['requests'] for r in results)
    return (requests / span, most,
            sum(r['connection_waits'] for r in results))


def variants(args, backend, database, bouncer):
    """``{label: (extra <relstorage> lines, the database the storages
    connect to)}``; on PostgreSQL also through ``bouncer`` (PgBouncer in
    transaction mode), the clients unbounded and in its mode."""
    found = {}
    if 'unbounded' in args.variants:
        found['unbounded'] = ([], database)
    if 'bounded' in args.variants:
        found[f'max-connections {args.max_connections}'] = (
            [f'max-connections {args.max_connections}'], database)
    if bouncer is not None:
        found[f'pgbouncer, pool {args.pool_size}'] = (
            [], database.through(bouncer.port).pooled())
    return found


def start_bouncer(args, backend, database):
    """A private PgBouncer in front of the PostgreSQL server (None on
    other backends, or without the pgbouncer variant)."""
    if backend != 'postgresql' or 'pgbouncer' not in args.variants:
        return None
    try:
        return Bouncer(database.server(), 'transaction', args.pool_size)
    except Missing as e:
        raise SystemExit(f'{e}; or run with --variants unbounded,bounded')


def run_backend(args, backend, database, bouncer, owners):
    """Every variant on ``backend``, ``--repeat`` times, taking turns:
    ``{label: (best rate, most sessions, most waits)}``."""
    found = {}
    name = 'bench_connections'
    for turn in range(args.repeat):
        for label, (lines, route) in variants(args, backend, database,
                                              bouncer).items():
            database.create(name)
            try:
                zconfig = ('%import relstorage\n<zodb>\n'
                           + relstorage_section(route, 'ours', name, False,
                                                lines)
                           + '</zodb>\n')
                populate(zconfig, args.objects, owners)
                log(f'{backend}, {label}, run {turn + 1}')
                rate, most, waits = one_run(
                    args, database, backend, name, zconfig, owners)
            finally:
                database.drop(name)
            log(f'  {rate:.0f} requests/s, at most {most} sessions, '
                f'{waits} waits at the bound')
            best = found.get(label)
            if best is None or rate > best[0]:
                found[label] = (rate, most, waits)
            else:
                found[label] = (best[0], max(best[1], most),
                                max(best[2], waits))
    return found


def main(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == 'worker':
        p = Parser('one worker process')
        for key in ('--zconfig', '--barrier'):
            p.add_argument(key, required=True)
        for key in ('--index', '--threads', '--requests', '--reads',
                    '--objects'):
            p.add_argument(key, type=int, required=True)
        worker(p.parse_args(argv[1:]))
        return
    parser = Parser(__doc__.splitlines()[0])
    parser.choice('backends', BACKENDS)
    parser.add_argument('--processes', type=int, default=8)
    parser.add_argument('--threads', type=int, default=8)
    parser.add_argument('--requests', type=int, default=100,
                        help='requests per thread')
    parser.add_argument('--reads', type=int, default=20,
                        help='objects read per request')
    parser.add_argument('--objects', type=int, default=5000)
    parser.add_argument('--max-connections', type=int, default=4)
    parser.add_argument('--pool-size', type=int, default=20,
                        help="PgBouncer's default_pool_size (default 20, "
                        "PgBouncer's own default)")
    parser.choice('variants', VARIANTS, help='comma-separated: '
                  'unbounded, bounded (max-connections), pgbouncer '
                  '(PostgreSQL only)')
    parser.repeat(2)
    parser.servers()
    parser.results('connections.json', keep_data=False)
    args = parser.parse(argv)
    servers = {}
    for backend in args.backends:
        servers[backend] = database_for(backend, args).server_version()
    env = environment(servers, processes=args.processes,
                      threads=args.threads, requests=args.requests,
                      reads=args.reads, objects=args.objects,
                      max_connections=args.max_connections,
                      variants=args.variants,
                      pgbouncer_pool_size=(args.pool_size
                                           if 'pgbouncer' in args.variants
                                           else None))
    owners = [f'{p}-{t}' for p in range(args.processes)
              for t in range(args.threads)]
    table = []
    document = {'environment': env, 'results': {}}
    for backend in args.backends:
        database = database_for(backend, args)
        bouncer = start_bouncer(args, backend, database)
        try:
            found = run_backend(args, backend, database, bouncer, owners)
        finally:
            if bouncer is not None:
                bouncer.close()

        base = found.get('unbounded', (None,))[0]
        for label, (rate, most, waits) in found.items():
            ratio = rate / base if base else None
            table.append((backend, label, f'{rate:.0f}', str(most),
                          str(waits),
                          '-' if ratio is None else f'{ratio:.2f}'))
            document['results'].setdefault(backend, {})[label] = {
                'rate': rate, 'most_sessions': most, 'waits': waits,
                'ratio': ratio}
    lines = heading(finish(env)) + [
        f'{args.processes} processes x {args.threads} threads, '
        f'{args.requests} requests each ({args.reads} reads, 1 write), '
        f'{args.objects} objects, history-free; best of {args.repeat}.',
        ''] + render(('backend', 'variant', 'requests/s', 'most sessions',
                      'waits', 'vs unbounded'), table)
    show(lines)
    write_results(args.json, document)


if __name__ == '__main__':
    main()
