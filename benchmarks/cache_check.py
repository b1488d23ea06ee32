"""Hunts stale reads: processes of the soak's requests workload, each
checking what its storage serves and recording what fed its shared cache.

    .venv/bin/python benchmarks/cache_check.py --backend mysql --mode hf
        [--minutes 30] [--processes 4] [--objects 20000] [--no-check]

An hour's soak on MariaDB once had a worker retry one request 6,133 times:
its process's shared cache (relstorage.cache.local) held an old revision
as current past a newer one's tid (docs/performance.rst, "Soak").  Each
process here runs soak_workload.py's worker (our side only) with two
additions, both in its own process, nothing changed in the package:

- every load the storage serves, but those of objects moved since the last
  poll (served as of that poll on purpose), is read again from the
  database in the same snapshot (one more round trip a load; ``--no-check``
  leaves it out, to keep the soak's timing); a different tid is a stale
  read;
- a recorder keeps the process's last 20,000 events (and, for the whole
  run, the latest tid any poll reported for each oid): each poll (its
  previous and new tid, the oids it reported), each change list applied
  to the cache, each load the cache stored and each commit it stored,
  each snapshot a commit began and a poll adopted, each end of a snapshot
  by the idle thread, each snapshot begun between polls.

A stale read, or a conflict after which the cache proves it missed a
change (the storage logs that too), writes the events touching that oid
to ``benchmarks/results/cache-check-PID.txt`` and counts; the run goes on.
Exit status 1 when anything was found.
"""
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

EVENTS = collections.deque(maxlen=20000)
FOUND = []
#: The latest tid any poll's change list gave for each oid, kept for the
#: whole run (the events reach back only seconds on a busy run).
REPORTED = {}


def _event(*what):
    EVENTS.append((round(time.time(), 6), threading.current_thread().name)
                  + what)


def _oids(oid_bytes_list):
    return tuple(int.from_bytes(o, 'big') for o in oid_bytes_list)


def record():
    """Wrap what feeds the shared cache, and the load, in this process."""
    from ZODB.utils import u64

    from relstorage.cache import local
    from relstorage.storage import core
    cache, storage = local.LocalCache, core.RelStorage

    def wrap(cls, name, make):
        setattr(cls, name, make(getattr(cls, name)))

    def advance(real):
        def advance(self, from_tid, to_tid, changes):
            changes = tuple(changes)
            for oid, tid in changes:
                if tid > REPORTED.get(oid, 0):
                    REPORTED[oid] = tid
            done = real(self, from_tid, to_tid, changes)
            _event('advance', from_tid, to_tid, done, changes)
            return done
        return advance

    def store_loaded(real):
        def store_loaded(self, oid, tid, state, snapshot):
            horizon = self._horizon
            real(self, oid, tid, state, snapshot)
            _event('loaded', oid, tid, snapshot, horizon)
        return store_loaded

    def store_committed(real):
        def store_committed(self, tid, states):
            horizon = self._horizon
            real(self, tid, states)
            _event('committed', tid, tuple(states), horizon)
        return store_committed

    def poll(real):
        def poll_invalidations(self):
            prev, adopted = self._polled_tid, self._adopted
            found = real(self)
            _event('poll', prev, self._snapshot_tid,
                   adopted and adopted[:2],
                   None if found is None else _oids(found))
            return found
        return poll_invalidations

    def take(real):
        def take(self, after_tid, rows):
            real(self, after_tid, rows)
            _event('adopt', after_tid, self._adopted[1],
                   tuple(self._adopted[2]))
        return take

    def idle_end(real):
        def end(self, loads=None):
            before = self._snapshot_tid
            real(self, loads)
            _event('idle', loads, before, self._snapshot_tid)
        return end

    def between(real):
        def between(self):
            real(self)
            _event('between', self._polled_tid, self._snapshot_tid,
                   tuple(self._moved))
        return between

    def after_conflict(real):
        def after(self, error):
            missed = real(self, error)
            if missed:
                oid, (committed, read) = u64(error.oid), map(u64, error.serials)
                _event('STALE', oid, read, committed, self._cache.horizon,
                       self._polled_tid)
                _found('conflict', oid, read, committed)
            return missed
        return after

    checking = not os.environ.get('CACHE_CHECK_OFF')

    def load(real):
        def load(self, oid, version=''):
            state, tid = real(self, oid, version)
            if not checking:
                return state, tid
            oid_int = u64(oid)
            with self._lock:
                if oid_int in self._moved:
                    return state, tid
                row = self._adapter.mover.load_current(
                    self._load_cursor, oid_int)
                snapshot = self._snapshot_tid
            if row is not None and row[1] != u64(tid):
                _event('BAD', oid_int, u64(tid), row[1], snapshot)
                _found('load', oid_int, u64(tid), row[1])
            return state, tid
        return load

    wrap(cache, 'advance', advance)
    wrap(cache, 'store_loaded', store_loaded)
    wrap(cache, 'store_committed', store_committed)
    wrap(storage, 'poll_invalidations', poll)
    wrap(storage, '_take_commit_snapshot', take)
    wrap(storage, '_end_idle_snapshot', idle_end)
    wrap(storage, '_start_between_polls', between)
    wrap(storage, '_after_conflict', after_conflict)
    wrap(storage, 'load', load)


def _found(how, oid, served, current):
    """Write the events touching ``oid`` (and every poll) to the file."""
    FOUND.append({'how': how, 'oid': oid, 'served': served,
                  'current': current, 'time': time.time()})
    lines = []
    for event in list(EVENTS):
        kind = event[2]
        if kind in ('loaded', 'BAD', 'STALE') and event[3] != oid:
            continue
        if kind == 'advance':
            event = event[:6] + (
                [c for c in event[6] if c[0] == oid], len(event[6]))
        elif kind == 'adopt':
            event = event[:5] + (
                [c for c in event[5] if c[0] == oid], len(event[5]))
        elif kind == 'committed':
            event = event[:3] + (event[3], oid in event[4], event[5])
        elif kind == 'poll' and event[6] is not None:
            event = event[:6] + (oid in event[6], len(event[6]))
        elif kind == 'between':
            event = event[:5] + (oid in event[5], len(event[5]))
        lines.append(repr(event))
    path = HERE / 'results' / f'cache-check-{os.getpid()}.txt'
    with open(path, 'a') as f:
        f.write(f'== {how}: oid {oid:#x} served {served}, database has '
                f'{current}; the latest tid a poll reported for it: '
                f'{REPORTED.get(oid)}\n')
        f.write('\n'.join(lines) + '\n')


def child(argv):
    """``child setup|worker ...``: soak_workload's command, recorded."""
    import soak_workload
    command = argv[0]
    if command == 'soak-worker':
        record()
    args = soak_workload.parse_args(argv)
    result = soak_workload.COMMANDS[command](args)
    result['found'] = FOUND
    with open(args.out, 'w') as f:
        json.dump(result, f)


def main(argv=None):
    from harness.backends import MODES, database_for, relstorage_section
    from harness.cli import Parser
    from harness.report import log
    parser = Parser(__doc__.splitlines()[0])
    parser.add_argument('--backend', choices=('postgresql', 'mysql'),
                        required=True)
    parser.add_argument('--mode', choices=tuple(MODES), required=True)
    parser.add_argument('--minutes', type=float, default=30)
    parser.add_argument('--processes', type=int, default=4)
    parser.add_argument('--objects', type=int, default=20000)
    parser.add_argument('--blobs', type=int, default=200)
    parser.add_argument('--no-check', action='store_true',
                        help='no second read of each load (the recorder '
                             'and the conflicts\' proof stay)')
    parser.servers(sqlite_synchronous=False)
    args = parser.parse(argv)
    database = database_for(args.backend, args)
    name = f'cachecheck_{args.mode}'
    database.create(name)
    tmp = Path(tempfile.mkdtemp(prefix='bench-cachecheck-'))

    def zconfig(blob_dir):
        return '%import relstorage\n' + relstorage_section(
            database, 'ours', name, MODES[args.mode][1],
            [f'blob-dir {blob_dir}', 'shared-blob-dir false'])

    def run(*cmd, wait=True):
        env = dict(os.environ)
        if args.no_check:
            env['CACHE_CHECK_OFF'] = '1'
        process = subprocess.Popen(
            [sys.executable, __file__, 'child', *map(str, cmd)], env=env)
        if wait and process.wait():
            raise SystemExit(f'{cmd[0]} failed')
        return process

    found = []
    try:
        log(f'{args.backend} {args.mode}: {args.objects:,} objects, '
            f'{args.blobs} blobs')
        run('soak-setup', '--out', tmp / 'setup.json', '--expect-under',
            HERE.parent, '--zconfig', zconfig(tmp / 'blobs-setup'),
            '--objects', args.objects, '--blobs', args.blobs)
        start = time.time() + 3
        until = start + args.minutes * 60
        workers = [run(
            'soak-worker', '--out', tmp / f'worker-{i}.json',
            '--expect-under', HERE.parent,
            '--zconfig', zconfig(tmp / f'blobs-{i}'),
            '--objects', args.objects, '--blobs', args.blobs,
            '--seed', 1000 + i, '--start', start, '--until', until,
            '--window', 60, '--windows', tmp / f'windows-{i}.jsonl',
            wait=False) for i in range(args.processes)]
        log(f'{args.processes} workers for {args.minutes:g} minutes, '
            f'loads {"not " if args.no_check else ""}checked')
        requests = 0
        for i, worker in enumerate(workers):
            if worker.wait():
                raise SystemExit(f'worker {i} failed')
            with open(tmp / f'worker-{i}.json') as f:
                result = json.load(f)
            requests += result['requests']
            found += result['found']
        log(f'{requests:,} requests; {len(found)} stale '
            f'{"read" if len(found) == 1 else "reads"} found'
            + ''.join(f'\n  {f["how"]}: oid {f["oid"]:#x} served '
                      f'{f["served"]}, database {f["current"]}'
                      for f in found)
            + ('\n  events in benchmarks/results/cache-check-*.txt'
               if found else ''))
    finally:
        database.drop(name)
    return 1 if found else 0


if __name__ == '__main__':
    if sys.argv[1:2] == ['child']:
        child(sys.argv[2:])
    else:
        sys.exit(main())
