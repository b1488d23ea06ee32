"""Packing: our relstorage against RelStorage 4.3, side by side in one run.

    .venv/bin/python benchmarks/pack.py [--backends postgresql,mysql]
        [--modes hp,hf] [--sides ours,ref] [--objects 1000000] [--quick]

For each backend, history mode and side, on a fresh database
(``packbench_<side>_<mode>``), with pack_workload.py running in the side's
own interpreter:

1. ``build``: ``--objects`` documents in folders, updates, then half of
   them made unreachable (the same graph on both sides, from ``--seed``);
2. the server settles: on MariaDB, a wait until InnoDB has purged the
   build and written most of the pages it dirtied back, then until its
   checkpoint age is below 5 % of its most (as PostgreSQL's CHECKPOINT;
   ``backends.MariaDB.settle``; the same for both sides, its seconds in
   the record), then the writer alone for
   ``--writer-seconds``: small commits, their latency (p50, p99) without
   a pack;
3. the first pack, to now, by the side's ``zodbpack`` in a subprocess,
   while the writer runs throughout: the pack's wall time, the writer's
   latency during it, and the pack process's peak RSS (``os.wait4``);
4. ``grow``: ``--grow`` of the built size again (adds, updates, removals);
5. the server settles again, then the second pack, alone: its wall time
   and peak RSS;
6. ``count``: every object reachable from the root loaded through the
   storage (a pack that removed one fails here), and the documents found
   checked against the count the workload keeps.

The rows of every table are counted after each step.  Targets: ours packs
the first time at least 5 times as fast as RelStorage 4.3 on PostgreSQL, 4
times on MariaDB and MySQL; our second pack
takes at most a fifth of our first; our writer's p99 during the pack is at
most twice its p99 alone; our pack process peaks below 500 MB.

Each side packs with its ``zodbpack`` (``--ours-zodbpack``,
``--ref-zodbpack``: a command to which ``--days=D CONFIG`` is appended;
default the script next to each side's interpreter).  When that script
does not exist, the side packs with ``pack_workload.py pack`` instead
(``storage.pack(t, referencesf)`` in a process of the same interpreter),
and the report says so.  The environment, the reference venv, the
databases and the MariaDB patch of RelStorage 4.3 (applied in the
workload processes only: 4.3's zodbpack runs as published) are the
harness's (``harness/``), as for run.py.

With ``--round-trips`` or ``--rtt MS`` every step reaches the database
through a relay process, as in run.py, and the pack process through a
second relay of its own (a config file of its own), whose counts this
script reads before and after each pack: the writer's commits during the
first pack cross the other relay and are not counted with the pack's.  The
report adds each pack's round trips, in all and per 1,000 object_state
rows before it.  See README.rst.
"""
import collections
import json
import os
import shlex
import sys
import threading
import time
from pathlib import Path

from harness import DATA, backends, roundtrips
from harness.backends import MODES, TITLES, count_rows, relstorage_zconfig
from harness.cli import Parser
from harness.environment import (digest_after, environment, finish,
                                 sources_warning, src_digest)
from harness.figures import latencies
from harness.procs import WorkloadFailed, measured
from harness.report import (heading, log, patch_note, render, run_time,
                            show, target_lines, title, write_results)
from harness.sides import IMPLS, LABELS, Side as BaseSide, Turns, prepare

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / 'pack_workload.py'
#: This run's configs, logs and writer files (one directory per run).
WORK = DATA / 'pack' / str(os.getpid())
BACKENDS = ('postgresql', 'mysql')

#: The project's targets.
#: RS 4.3's first pack time / ours, at least, by backend (issue 37: 5 on
#: PostgreSQL, 4 on MariaDB and MySQL, whose deletions cost InnoDB as
#: much on both sides; docs/performance.rst).
FIRST_PACK_SPEEDUP = {'postgresql': 5.0, 'mysql': 4.0}
SECOND_OVER_FIRST = 0.2      # our second pack / our first, at most
P99_GROWTH = 2.0             # writer p99 during the pack / alone, at most
PEAK_RSS_MB = 500            # the pack process's peak RSS, below
SLOWEST = 50                 # the writer's slowest commits kept, with times
SAMPLE_EVERY = 1.0           # seconds between two samples of the server
LOG_LINES = 400              # the last lines of each pack's log kept

perf = time.perf_counter


# -- one side ------------------------------------------------------------

class Side(BaseSide):
    """One implementation on one backend, pack_workload.py in its
    interpreter, and its zodbpack: a command to which ``--days=D CONFIG``
    is appended (``--ours-zodbpack``, ``--ref-zodbpack``; default the
    script next to its interpreter), None when that script does not
    exist."""

    def __init__(self, impl, backend, args):
        super().__init__(impl, backend, WORKLOAD)
        given = args.ours_zodbpack if impl == 'ours' else args.ref_zodbpack
        words = shlex.split(given) if given else [str(self.script(
            'zodbpack'))]
        self.zodbpack = words if Path(words[0]).exists() else None

    def start(self, command, config, *rest):
        return super().start(command, config, *rest, stdout_json=True,
                             relay=f'{self.impl} {command}')

    def workload(self, command, config, *rest, timeout):
        return self.start(command, config, *rest).result(timeout)

    def pack(self, config, days, logfile, timeout):
        if self.zodbpack:
            cmd = self.zodbpack + [f'--days={days}', config]
            how = 'zodbpack'
        else:
            cmd = self.command('pack', config, '--days', days)
            how = 'pack_workload.py pack (no zodbpack)'
        seconds, rss = measured(cmd, logfile, timeout)
        # The log's lines, kept with the record (the work directory goes):
        # their times (UTC) set against the writer's slowest commits tell
        # which step of the pack slowed it.
        lines = Path(logfile).read_text(errors='replace').splitlines()
        return {'seconds': seconds, 'peak_rss_mb': rss, 'how': how,
                'command': ' '.join(str(c) for c in cmd), 'log': str(logfile),
                'log_tail': lines[-LOG_LINES:]}


class Writer:
    """The writer in the background, between ``start`` and ``stop``."""

    def __init__(self, side, config, tag, args, work=None):
        work = work or WORK
        self.files = {k: work / f'{tag}-{k}' for k in ('ready', 'stop',
                                                      'latencies')}
        for path in self.files.values():
            path.unlink(missing_ok=True)
        self.args = args
        self.child = side.start(
            'writer', config, '--seconds', args.timeout,
            '--out', self.files['latencies'], '--stop', self.files['stop'],
            '--ready', self.files['ready'], '--pause', args.writer_pause)

    def wait_ready(self, timeout=600):
        deadline = perf() + timeout
        while not self.files['ready'].exists():
            if self.child.poll() is not None:
                self.child.result(1)    # raises with its error
                raise WorkloadFailed('the writer exited before it was '
                                     'ready')
            if perf() > deadline:
                self.child.kill()
                raise WorkloadFailed('the writer was not ready after '
                                     f'{timeout}s')
            time.sleep(0.05)

    def stop(self):
        self.files['stop'].touch()
        summary = self.child.result(600)
        timed = json.loads(self.files['latencies'].read_text())
        summary.pop('info', None)
        slowest = sorted(timed, key=lambda pair: -pair[1])[:SLOWEST]
        return dict(summary,
                    latency=latencies([s for _, s in timed]),
                    slowest=[[utc(at), seconds] for at, seconds in slowest])


class ServerSampler:
    """Samples what the server does behind the clients (checkpoints, WAL,
    autovacuum; InnoDB's purge backlog and page writes: the backends'
    ``activity``) every SAMPLE_EVERY seconds in a thread of its own, so
    that a slow commit of the writer can be set against them by its
    time."""

    def __init__(self, database, name):
        self.database, self.name = database, name
        self.samples = []
        self.error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name='server sampler')
        self._thread.start()

    def _sample(self):
        """One sample; False once sampling must stop."""
        at = time.time()
        try:
            sample = self.database.activity(self.name)
        except Exception as e:  # the figures are a help, not a step
            self.error = f'{type(e).__name__}: {e}'
            return False
        if sample is None:
            return False
        self.samples.append([utc(at), sample])
        return True

    def _run(self):
        while self._sample():
            if self._stop.wait(SAMPLE_EVERY):
                return

    def stop(self):
        """``{'samples': [[utc, activity], ...], 'summary': {...}}``,
        with a last sample taken now, so that the summary spans all of
        what was sampled, however short."""
        self._stop.set()
        self._thread.join()
        if self.samples and self.error is None:
            self._sample()
        out = {'samples': self.samples,
               'summary': activity_summary(self.samples)}
        if self.error:
            out['error'] = self.error
        return out


def activity_summary(samples):
    """Counters as the difference between the first sample and the last,
    flags and lists as the seconds sampled with each value."""
    if not samples:
        return {}
    first, last = samples[0][1], samples[-1][1]
    out = {}
    for key, value in last.items():
        if isinstance(value, (bool, list)):
            seen = collections.Counter()
            for _, sample in samples:
                values = sample[key]
                for item in (values if isinstance(values, list)
                             else [key] if values else []):
                    seen[item] += 1
            out[key] = {item: count * SAMPLE_EVERY
                        for item, count in seen.items()}
        elif key in ('dirty', 'pages', 'history', 'checkpoint_mb'):
            out[f'{key}_max'] = max(sample[key] for _, sample in samples)
        else:
            out[key] = round(value - first[key], 1)
    return out


def utc(at):
    return (time.strftime('%H:%M:%S', time.gmtime(at))
            + f'.{int(at % 1 * 1000):03d}')


def writer_alone(side, config, tag, args, work=None):
    """The writer for ``--writer-seconds`` after its warm-up."""
    writer = Writer(side, config, tag, args, work)
    writer.wait_ready()
    time.sleep(args.writer_seconds)
    return writer.stop()


def settle(database, where, args):
    """Let the server finish the background work of the steps before
    (backends.MariaDB.settle) before a timed step; the seconds it took."""
    seconds = database.settle(args.timeout)
    if seconds >= 1:
        log(f'{where}: server settled in {seconds:.0f}s')
    return seconds


def one_side(side, database, backend, mode, args, relays):
    """Every step for one side; returns its record (with ``error`` when a
    step failed: the steps before it stand).  With ``relays`` active, the
    packs go through a relay of their own, whose counts are read around
    each pack."""
    name = f'packbench_{side.impl}_{mode}'
    tag = f'{backend}-{mode}-{side.impl}'
    config = WORK / f'{tag}.conf'
    options = args.ours_option if side.impl == 'ours' else ()
    config.write_text(relstorage_zconfig(
        relays.route(backend, database), side.impl, name, MODES[mode][1],
        options))
    pack_config = config
    if relays.active:
        pack_config = WORK / f'{tag}-pack.conf'
        pack_config.write_text(relstorage_zconfig(
            relays.route(backend, database, 'pack'), side.impl, name,
            MODES[mode][1], options))

    def pack(step, rows_before):
        before = relays.counts(backend, 'pack')
        out = side.pack(pack_config, args.days, WORK / f'{tag}-{step}.log',
                        args.timeout)
        relay = roundtrips.difference(
            before, before and relays.counts(backend, 'pack'),
            pack=1, kilo_row=rows_before / 1000)
        if relay:
            out['relay'] = relay
        return out

    record = {'database': name, 'config': str(config), 'rows': {},
              'server_settings': database.settings(),
              'options': list(args.ours_option) if side.impl == 'ours'
              else [],
              'src': src_digest() if side.impl == 'ours' else None}
    where = f'{TITLES[backend]} {mode} {side.label}'
    step = 'create'
    database.create(name)
    try:
        step = 'build'
        log(f'{where}: build, {args.objects:,} documents, seed {args.seed}')
        record['build'] = side.workload(
            'build', config, '--objects', args.objects, '--seed', args.seed,
            timeout=args.timeout)
        record['info'] = record['build'].pop('info')
        log(f'{where}: built in {record["build"]["seconds"]:.1f}s '
            f'({record["build"]["live"]:,} documents reachable)')
        record['rows']['built'] = count_rows(database, backend, name)

        step = 'settle'
        record['settle'] = {'built': settle(database, where, args)}

        step = 'writer alone'
        log(f'{where}: writer alone, {args.writer_seconds:g}s')
        record['writer_alone'] = writer_alone(side, config,
                                              f'{tag}-alone', args)

        step = 'first pack'
        how = 'zodbpack' if side.zodbpack else 'pack_workload.py pack'
        log(f'{where}: first pack ({how}), with the writer')
        writer = Writer(side, config, f'{tag}-pack', args)
        sampler = None
        try:
            writer.wait_ready()
            sampler = ServerSampler(database, name)
            record['pack1'] = pack('pack1', record['rows']['built'].get(
                'object_state', 0))
        finally:
            if sampler is not None:
                record['server_pack1'] = sampler.stop()
            try:
                record['writer_pack'] = writer.stop()
            except WorkloadFailed as e:
                if 'pack1' in record:
                    raise
                log(f'  the writer failed too: {e}')
        log(f'{where}: first pack {record["pack1"]["seconds"]:.1f}s, peak '
            f'RSS {record["pack1"]["peak_rss_mb"]:.0f} MiB')
        if record.get('server_pack1', {}).get('summary'):
            log(f'{where}: the server during the first pack: '
                f'{json.dumps(record["server_pack1"]["summary"])}')
        record['rows']['pack1'] = count_rows(database, backend, name)

        if side.impl == 'ref' and args.ref_first_pack_only:
            log(f'{where}: grow and second pack skipped '
                f'(--ref-first-pack-only)')
        else:
            step = 'grow'
            log(f'{where}: grow by {args.grow:g}')
            record['grow'] = side.workload('grow', config, '--fraction',
                                           args.grow, timeout=args.timeout)
            record['grow'].pop('info', None)
            record['rows']['grown'] = count_rows(database, backend, name)

            step = 'settle'
            record['settle']['grown'] = settle(database, where, args)

            step = 'second pack'
            log(f'{where}: second pack')
            record['pack2'] = pack('pack2', record['rows']['grown'].get(
                'object_state', 0))
            log(f'{where}: second pack {record["pack2"]["seconds"]:.1f}s, '
                f'peak RSS {record["pack2"]["peak_rss_mb"]:.0f} MiB')
            record['rows']['pack2'] = count_rows(database, backend, name)

        step = 'count'
        log(f'{where}: count (walk from the root)')
        record['count'] = side.workload('count', config,
                                        timeout=args.timeout)
        record['count'].pop('info', None)
        if not record['count']['ok']:
            raise WorkloadFailed(
                f'{record["count"]["documents"]} documents reachable, the '
                f'workload counts {record["count"]["live"]}')
    except (WorkloadFailed, RuntimeError, OSError) as e:
        record['error'] = f'{step}: {e}'
        log(f'  FAILED: {where}: {step}:\n{e}')
    finally:
        if not args.keep_data:
            database.drop(name)
    if side.impl == 'ours':
        record['src'] = digest_after(record['src'])
    return record


# -- figures and report --------------------------------------------------

def figures(record):
    """The figures of one side (None where a step did not run)."""
    def get(*path):
        value = record
        for key in path:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return value

    out = {
        'build': get('build', 'seconds'),
        'grow': get('grow', 'seconds'),
        'settle_built': get('settle', 'built'),
        'settle_grown': get('settle', 'grown'),
        'alone_p50': get('writer_alone', 'latency', 'p50'),
        'alone_p99': get('writer_alone', 'latency', 'p99'),
        'pack1': get('pack1', 'seconds'),
        'pack_p50': get('writer_pack', 'latency', 'p50'),
        'pack_p99': get('writer_pack', 'latency', 'p99'),
        'rss1': get('pack1', 'peak_rss_mb'),
        'pack2': get('pack2', 'seconds'),
        'rss2': get('pack2', 'peak_rss_mb'),
        'reachable': get('count', 'reachable'),
    }
    if out['pack1'] is None:
        # The writer's figures during a pack that failed say nothing.
        out['pack_p50'] = out['pack_p99'] = None
    for key in ('alone_p50', 'alone_p99', 'pack_p50', 'pack_p99'):
        if out[key] is not None:
            out[key] *= 1000
    out['p99_growth'] = (out['pack_p99'] / out['alone_p99']
                         if out['pack_p99'] and out['alone_p99'] else None)
    out['second_over_first'] = (out['pack2'] / out['pack1']
                                if out['pack2'] and out['pack1'] else None)
    rss = [v for v in (out['rss1'], out['rss2']) if v is not None]
    out['peak_rss'] = max(rss) if rss else None
    for when in ('built', 'pack1', 'grown', 'pack2'):
        rows = get('rows', when)
        out[f'rows_{when}'] = sum(rows.values()) if rows else None
        out[f'states_{when}'] = rows.get('object_state') if rows else None
    for step in ('pack1', 'pack2'):
        trips = roundtrips.per_operation(get(step, 'relay'))
        if trips:
            out[f'rt_{step}'] = trips['pack']
            out[f'rt_{step}_krow'] = trips.get('kilo_row')
    return out


#: The round-trip table: (key, label).
ROUND_TRIP_ROWS = (
    ('rt_pack1', 'first pack, in all'),
    ('rt_pack1_krow', '  per 1,000 object_state rows before it'),
    ('rt_pack2', 'second pack, in all'),
    ('rt_pack2_krow', '  per 1,000 object_state rows before it'),
)


def round_trip_lines(got):
    """Each pack's round trips (the pack process's relay), ours, RS 4.3
    and ours / RS 4.3 (< 1.0: ours makes fewer); nothing when they were
    not counted."""
    ours, ref = got.get('ours', {}), got.get('ref', {})
    rows = []
    for key, label in ROUND_TRIP_ROWS:
        o, r = ours.get(key), ref.get(key)
        if o is None and r is None:
            continue
        rows.append((label, roundtrips.fmt(o), roundtrips.fmt(r),
                     f'{o / r:.2f}' if o is not None and r else '-'))
    if not rows:
        return []
    return ['', 'Round trips of the pack process (start-up included; '
            'through a relay of its own):', ''] + render(
                ('pack', 'ours', 'RS 4.3', 'ours/4.3'), rows, right_from=1)


def fmt(value, unit):
    if value is None:
        return '-'
    if unit == 's':
        return f'{value:,.2f}' if value < 100 else f'{value:,.0f}'
    if unit == 'ms':
        return f'{value:.2f}' if value < 100 else f'{value:,.0f}'
    if unit == 'x':
        return f'{value:.2f}'
    if unit == 'MiB':
        return f'{value:,.0f}'
    return f'{value:,}'


#: (key, label, unit, compare, target): compare 'time' puts RS 4.3 / ours
#: in the ratio column; target (kind, value) is checked on ours.
ROWS = (
    ('build', 'build ({objects:,} documents)', 's', 'time', None),
    ('settle_built', 'server settling after the build', 's', None, None),
    ('alone_p50', 'writer alone, p50', 'ms', None, None),
    ('alone_p99', 'writer alone, p99', 'ms', None, None),
    ('pack1', 'first pack (writer running)', 's', 'time',
     ('ratio', FIRST_PACK_SPEEDUP)),
    ('pack_p50', 'writer during first pack, p50', 'ms', None, None),
    ('pack_p99', 'writer during first pack, p99', 'ms', None, None),
    ('p99_growth', 'writer p99, during pack / alone', 'x', None,
     ('at most', P99_GROWTH)),
    ('rss1', 'pack process peak RSS, first', 'MiB', None,
     ('below', PEAK_RSS_MB)),
    ('grow', 'grow (+{grow:.0%})', 's', 'time', None),
    ('settle_grown', 'server settling after the grow', 's', None, None),
    ('pack2', 'second pack (alone)', 's', 'time', None),
    ('second_over_first', 'second pack / first pack', 'x', None,
     ('at most', SECOND_OVER_FIRST)),
    ('rss2', 'pack process peak RSS, second', 'MiB', None,
     ('below', PEAK_RSS_MB)),
    ('states_built', 'object_state rows, built', 'rows', None, None),
    ('states_pack1', 'object_state rows, after first pack', 'rows', None,
     None),
    ('states_grown', 'object_state rows, after grow', 'rows', None, None),
    ('states_pack2', 'object_state rows, after second pack', 'rows', None,
     None),
    ('rows_built', 'all rows, built', 'rows', None, None),
    ('rows_pack2', 'all rows, after second pack', 'rows', None, None),
    ('reachable', 'objects reachable after the packs', 'obj', None, None),
)


def target_text(target):
    kind, value = target
    if kind == 'ratio':
        return f'>={value:g}'
    if kind == 'at most':
        return f'<={value:g}'
    return f'<{value:g}'


def meets(target, ours, ratio):
    kind, value = target
    if kind == 'ratio':
        return None if ratio is None else ratio >= value
    if ours is None:
        return None
    return ours <= value if kind == 'at most' else ours < value


def table(backend, mode, records, args):
    """The lines of one backend and mode, and its checks."""
    got = {impl: figures(r) for impl, r in records.items()}
    ours, ref = got.get('ours', {}), got.get('ref', {})
    header = ('figure', 'unit', 'ours', 'RS 4.3', 'ratio', 'target',
              'verdict')
    rows, checks = [], []
    where = f'{TITLES[backend]} {mode}'
    for key, label, unit, compare, target in ROWS:
        o, r = ours.get(key), ref.get(key)
        if o is None and r is None:
            continue
        label = label.format(objects=args.objects, grow=args.grow)
        ratio = r / o if compare == 'time' and o and r else None
        verdict = ''
        if target and isinstance(target[1], dict):
            target = (target[0], target[1][backend])
        if target:
            ok = meets(target, o, ratio)
            if ok is not None:
                checks.append({'where': where, 'figure': key,
                               'label': label, 'ours': o, 'ref': r,
                               'ratio': ratio, 'target': target_text(target),
                               'ok': ok})
            verdict = {True: 'ok', False: 'MISS', None: 'n/a'}[ok]
        rows.append((label, unit, fmt(o, unit), fmt(r, unit),
                     '-' if ratio is None else f'{ratio:.2f}',
                     target_text(target) if target else '', verdict))
    lines = title(f'{TITLES[backend]}, {MODES[mode][0]}')
    lines += render(header, rows) if rows else ['(no figures)']
    for impl, record in records.items():
        label = LABELS[impl]
        for step in ('pack1', 'pack2'):
            how = record.get(step, {}).get('how')
            if how and how != 'zodbpack':
                lines.append(f'{label} packed with {how}.')
                break
        for step in ('writer_alone', 'writer_pack'):
            w = record.get(step)
            if w:
                errors = ', '.join(f'{k} {v}' for k, v in
                                   w['errors'].items()) or 'none'
                when = 'alone' if step == 'writer_alone' else \
                    'during the first pack'
                lines.append(
                    f'{label}: writer {when}: {w["timed"]} '
                    f'timed commits in {w["seconds"]:.1f}s, retried '
                    f'errors: {errors}')
        if record.get('count'):
            c = record['count']
            lines.append(f'{label}: count: {c["reachable"]:,} objects '
                         f'reachable ({c["documents"]:,} documents, '
                         f'expected {c["live"]:,}: '
                         f'{"ok" if c["ok"] else "WRONG"}), walked in '
                         f'{c["seconds"]:.1f}s')
        if record.get('error'):
            lines.append(f'{label} FAILED in {record["error"]}')
    lines.append('ratio: RS 4.3 time / ours (> 1: ours is faster); the '
                 'targets are checked on ours.')
    lines += round_trip_lines(got)
    return lines + [''], checks


def verdicts(checks):
    return target_lines(
        checks,
        lambda c: f'{c["ratio"] if c["ratio"] is not None else c["ours"]:.2f}',
        lambda c: f'{c["target"]}')


# -- main ----------------------------------------------------------------

def parse_args(argv):
    parser = Parser('Pack time, writer latency during a pack and pack '
                    'memory against RelStorage 4.3.')
    parser.choice('backends', BACKENDS, help='comma-separated: postgresql, '
                  'mysql (MariaDB)')
    parser.choice('modes', MODES, default='hp', help='comma-separated: hp '
                  '(history-preserving, the default), hf (history-free)')
    parser.choice('sides', IMPLS, help='comma-separated: ours, ref (RS 4.3)')
    parser.scaled('--objects', 1000000, 20000, help='documents built '
                  '(default 1,000,000; 20,000 with --quick)')
    parser.quick()
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--ours-option', action='append', default=[],
                        metavar='"KEY VALUE"',
                        help='a line added to our <relstorage> section '
                        '(repeatable), e.g. "pack-duty-cycle 1.0"; the '
                        'results record it')
    parser.add_argument('--ref-first-pack-only', action='store_true',
                        help="skip RS 4.3's grow and second pack (no target "
                        'needs them; at a million documents its second '
                        'pack takes about an hour)')
    parser.add_argument('--grow', type=float, default=0.1,
                        help='the grow step, as a fraction of --objects '
                        '(default 0.1)')
    parser.scaled('--writer-seconds', 30, 10, type=float,
                  help='the writer alone (default 30, 10 with --quick)')
    parser.add_argument('--writer-pause', type=float, default=0.02,
                        help="seconds between the writer's commits "
                        '(default 0.02)')
    parser.add_argument('--days', type=float, default=-1,
                        help='zodbpack --days (default -1: pack to now)')
    parser.add_argument('--ours-zodbpack',
                        help='our pack command (default: zodbpack next to '
                        'this interpreter; pack_workload.py pack when it '
                        'does not exist)')
    parser.add_argument('--ref-zodbpack',
                        help="RS 4.3's pack command (default: the reference "
                        "venv's zodbpack)")
    parser.add_argument('--timeout', type=float, default=6 * 3600,
                        help='seconds any one step may take (default 6 h)')
    parser.servers(sqlite_synchronous=False)
    parser.round_trips()
    parser.results('pack.json', keep_help='keep the databases, configs and '
                   'logs')
    return parser.parse(argv)


def main(argv=None):
    args = parse_args(argv)
    with roundtrips.Relays(args.rtt) as relays:
        return run(args, relays)


def run(args, relays):
    started = time.monotonic()
    probes = prepare(args.sides, HERE / 'workload.py', log)
    databases = {b: backends.database_for(b, args) for b in args.backends}
    env = environment({b: d.server_version() for b, d in databases.items()},
                      probes)
    WORK.mkdir(parents=True, exist_ok=True)
    lines = heading(env)
    warnings = []
    for impl in args.sides:
        if Side(impl, 'postgresql', args).zodbpack is None:
            warnings.append(
                f'WARNING: {LABELS[impl]} has no zodbpack script '
                f'(--{impl}-zodbpack): it packs with pack_workload.py pack, '
                f'storage.pack(t, referencesf) in a process of its '
                f'interpreter.')
    for w in warnings:
        log(w)
    if 'mysql' in args.backends and 'ref' in args.sides:
        warnings += patch_note(' Its zodbpack runs unpatched.')[:1]
    lines += warnings + [
        f'{args.objects:,} documents per build (seed {args.seed}), half of '
        f'them unreachable; writer: one small commit, then '
        f'{args.writer_pause:g}s pause, latency from begin to the end of '
        f'commit; writer alone {args.writer_seconds:g}s; packs to now '
        f'(--days={args.days:g}), times are the pack process\'s wall time '
        f'(start-up included); grow: +{args.grow:.0%} of the build.', '']
    if args.ours_option:
        lines[-1:-1] = [f'Our <relstorage> section adds: '
                        f'{"; ".join(args.ours_option)} (--ours-option).']
    if relays.active:
        lines[-1:-1] = [
            'Round trips: every step reaches the database through a relay '
            'process adding '
            + roundtrips.added_latency(args.rtt)
            + '; the pack process through a relay of its own, read before '
            'and after each pack.']
    for backend, database in databases.items():
        settings = database.settings()
        if settings:
            lines[-1:-1] = [f'{TITLES[backend]} settings: ' + ', '.join(
                f'{k}={v}' for k, v in settings.items())]
    show(lines)

    results, checks = {}, []
    order = [impl for impl in IMPLS if impl in args.sides]
    turns = Turns()
    for backend, database in databases.items():
        for mode in args.modes:
            records = {}
            for _, impl in turns.rounds(order, 1):
                records[impl] = one_side(Side(impl, backend, args),
                                         database, backend, mode, args,
                                         relays)
            records = {impl: records[impl] for impl in order}
            results.setdefault(backend, {})[mode] = records
            text, found = table(backend, mode, records, args)
            checks += found
            show(text, lines)
    relays.stop()
    if not args.keep_data:
        for path in WORK.glob('*'):
            path.unlink()
        # And the parents when no other run (or run.py) left files there.
        for path in (WORK, WORK.parent, DATA):
            try:
                path.rmdir()
            except OSError:
                pass
    sources = [r.get('src') for modes in results.values()
               for records in modes.values() for r in records.values()]
    tail = sources_warning(sources) + verdicts(checks) + run_time(started)
    show(tail)
    write_results(args.json, {
        'environment': finish(env),
        'settings': {k: getattr(args, k) for k in (
            'backends', 'modes', 'sides', 'objects', 'quick', 'seed', 'grow',
            'writer_seconds', 'writer_pause', 'days', 'ours_zodbpack',
            'ref_zodbpack', 'ours_option', 'ref_first_pack_only',
            'round_trips', 'rtt')},
        'relay': relays.describe() if relays.active else None,
        'results': results,
        'summary': {b: {m: {impl: figures(r) for impl, r in records.items()}
                        for m, records in modes.items()}
                    for b, modes in results.items()},
        'checks': checks,
        'elapsed_seconds': time.monotonic() - started,
        'report': '\n'.join(lines + tail)})
    failed = any('error' in r for modes in results.values()
                 for records in modes.values() for r in records.values())
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
