"""Scale: a site of ten million objects, from zodbconvert to a second pack.

    .venv/bin/python benchmarks/scale.py [--objects 10000000]
        [--cells postgresql:hp,mysql:hf] [--sides ours] [--baseline FILE]

The source is a FileStorage of ``--objects`` objects made once by
``convert_workload.py generate --shape scale --oids N --no-undo-adds``
(folders of ``OOBTree``\\ s, documents added in batches, edited, some
removed, a small attachment on one document in 100) and kept under
``benchmarks/data/convert/``.  For each cell (a backend and a history
mode) and side, on a fresh database (``scalebench_<side>_<mode>``):

1. ``zodbconvert`` copies the source in (the process's wall time and
   peak RSS, ``os.wait4``); the rows are checked against the source;
2. ``first-request``, three new processes each opening the database and
   serving a folder listing: the seconds from the process's creation
   to the page served;
3. ``fill-cache`` loads documents until the local cache holds
   ``--cache-entries`` entries, then closes (the persistent cache file
   is written: ``cache-local-dir``); three more ``first-request``
   processes open the database with that file: how long the storage took
   to open (reading and checking the file), to the page served, and
   (ours: a large file's entries go in by a thread after the open) until
   the file was read back;
4. the writer alone for ``--writer-seconds`` (pack_workload.py's loop:
   one small commit, a pause): its latency;
5. the first pack (``zodbpack --days=-1``) with the writer running: the
   pack's wall time, per object_state row before it, its peak RSS, the
   writer's latency meanwhile;
6. ``grow`` (``--grow`` of the documents: adds, edits, removals), then
   the second pack, the writer running again;
7. the space given back: the step docs/operations.rst ("Space")
   documents, run here: on PostgreSQL ``VACUUM FULL`` of
   ``object_state``, ``object_ref`` and ``blob_chunk``; on MariaDB
   ``OPTIMIZE TABLE`` of the tables ``zodbpack --vacuum`` rebuilds.  The
   database's size on disk (PostgreSQL ``pg_database_size``, InnoDB the
   allocated size of the schema's tablespaces) after each step;
8. ``check``: every folder counted against ``count``, a sample of
   documents and attachments read.

Targets (ours): zodbconvert's peak RSS at most 300 MB; a new process's
first page at most 2 s, with the persistent cache too, and the cache file
opened and checked in at most 2 s (the open's wait: ours reads a large
file's entries back after it, and that time is reported beside); each
pack's peak RSS at most 500 MB, and, with ``--baseline`` (the results of
a run at one million objects, on the same machine: machines differ
between sessions), each pack's time per row at most 1.5 times that
run's.  RelStorage 4.3
(``--sides ours,ref``) runs the same steps, at one million objects where
ten would take too long.  See README.rst.
"""
import json
import os
import re
import sys
import time
from pathlib import Path

import convert
import pack
from harness import DATA, backends
from harness.backends import MODES, TITLES, count_rows, relstorage_section
from harness.cli import Parser
from harness.environment import (digest_after, environment, finish,
                                 sources_warning, src_digest)
from harness.figures import median
from harness.procs import WorkloadFailed, measured
from harness.report import (heading, log, render, run_time, show,
                            target_lines, write_results)
from harness.sides import IMPLS, LABELS, prepare

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / 'scale_workload.py'
WORK = DATA / 'scale' / str(os.getpid())

#: The project's targets.
CONVERT_RSS_MB = 300
FIRST_REQUEST_S = 2.0
CACHE_OPEN_S = 2.0
PACK_RSS_MB = 500
PER_ROW_GROWTH = 1.5
REQUESTS = 3

perf = time.perf_counter


class Side(pack.Side):
    """One implementation on one backend: scale_workload.py in its
    interpreter, its zodbpack (pack.Side) and its zodbconvert
    (convert.Side)."""

    def __init__(self, impl, backend, args):
        super().__init__(impl, backend, args)
        self.program = WORKLOAD
        self.convert = convert.Side(impl, backend)

    def json(self, command, config, *rest, timeout):
        out = self.workload(command, config, *rest, timeout=timeout)
        out.pop('info', None)
        return out


# -- the server's side ---------------------------------------------------

def reclaim(database, backend, name, mode):
    """The documented step that gives the space of removed rows back to
    the file system; its statement and seconds."""
    conn, tables, quote = backends.open_tables(database, backend, name)
    try:
        if backend == 'postgresql':
            wanted = ('object_state', 'object_ref', 'blob_chunk')
            statement = 'VACUUM FULL ' + ', '.join(
                t for t in wanted if t in tables)
            conn.rollback()
            conn.autocommit = True
        else:
            wanted = ('object_state', 'object_ref', 'object_blob',
                      'blob_chunk', 'transaction_log', 'current_object')
            statement = 'OPTIMIZE TABLE ' + ', '.join(
                quote.format(t) for t in wanted if t in tables)
        cur = conn.cursor()
        started = perf()
        cur.execute(statement)
        if cur.description:
            cur.fetchall()
        return {'statement': statement, 'seconds': perf() - started}
    finally:
        conn.close()


# -- one side ------------------------------------------------------------

def one_side(side, database, backend, mode, source, manifest, args):
    """Every step for one side; returns its record (with ``error`` when a
    step failed: the steps before it stand)."""
    name = f'scalebench_{side.impl}_{mode}'
    tag = f'{backend}-{mode}-{side.impl}'
    blob_dir = backends.fresh_dir(WORK / f'{tag}-blobs')
    cache_dir = backends.fresh_dir(WORK / f'{tag}-cache')
    convert_config = WORK / f'{tag}-convert.conf'
    convert_config.write_text(convert.convert_zconfig(
        database, side.impl, name, mode, source, blob_dir))
    config = WORK / f'{tag}.conf'
    config.write_text('%import relstorage\n' + convert.destination_zconfig(
        database, side.impl, name, mode, blob_dir))
    cached = WORK / f'{tag}-cached.conf'
    cached.write_text('%import relstorage\n' + relstorage_section(
        database, side.impl, name, MODES[mode][1], [
            f'blob-dir {blob_dir}', 'shared-blob-dir false',
            f'cache-local-dir {cache_dir}',
            f'cache-local-mb {args.cache_mb}']))
    where = f'{TITLES[backend]} {mode} {side.label}'
    record = {'database': name, 'sizes': {},
              'server_settings': database.settings(),
              'src': src_digest() if side.impl == 'ours' else None}
    timeout = args.timeout

    def size(step):
        record['sizes'][step] = database.disk_bytes(name)
        log(f'{where}: {record["sizes"][step] / 1e9:.2f} GB on disk '
            f'({step})')

    def requests(config_file, what):
        runs = [side.json('first-request', config_file, '--seed', i,
                          timeout=timeout) for i in range(REQUESTS)]
        log(f'{where}: first request {what}: ' + ', '.join(
            f'{r["since_process_start"]:.2f}s' for r in runs))
        return runs

    def pack_with_writer(step):
        rows = count_rows(database, backend, name)
        record['rows'][f'before_{step}'] = rows
        writer = pack.Writer(side, config, f'{tag}-{step}', args, WORK)
        out = sampler = None
        try:
            writer.wait_ready()
            sampler = pack.ServerSampler(database, name)
            out = side.pack(config, -1, WORK / f'{tag}-{step}.log', timeout)
        finally:
            if sampler is not None:
                record[f'server_{step}'] = sampler.stop()
            try:
                record[f'writer_{step}'] = writer.stop()
            except WorkloadFailed as e:
                if out is not None:
                    raise
                log(f'  the writer failed too: {e}')
        out['rows_before'] = rows.get('object_state', 0)
        out['us_per_row'] = out['seconds'] / max(out['rows_before'], 1) * 1e6
        out['peak_rss_mb'] = out['peak_rss_mb'] * 2**20 / 1e6
        out.pop('log_tail', None)
        record[step] = out
        log(f'{where}: {step} {out["seconds"]:.1f}s '
            f'({out["us_per_row"]:.1f} us per row), peak RSS '
            f'{out["peak_rss_mb"]:.0f} MB')
        summary = record.get(f'server_{step}', {}).get('summary')
        if summary:
            log(f'{where}: the server during {step}: {json.dumps(summary)}')

    step = 'create'
    database.create(name)
    try:
        step = 'convert'
        log(f'{where}: zodbconvert ({manifest["records"]:,} records)')
        seconds, rss = measured(side.convert.zodbconvert + [convert_config],
                                WORK / f'{tag}-convert.log', timeout)
        copied = (manifest['records'] if MODES[mode][1]
                  else manifest['current_objects'])
        record['convert'] = {'seconds': seconds,
                             'peak_rss_mb': rss * 2**20 / 1e6,
                             'records': copied,
                             'records_per_second': copied / seconds}
        log(f'{where}: converted in {seconds:.0f}s '
            f'({copied / seconds:,.0f} records/s), peak RSS '
            f'{record["convert"]["peak_rss_mb"]:.0f} MB')
        counts = convert.destination_counts(database, backend, name, mode,
                                            manifest)
        record['rows'] = {'converted': counts['rows']}
        record['convert']['rows_ok'] = counts['ok']
        if not counts['ok']:
            raise WorkloadFailed(f'the copy holds {counts}')
        size('converted')
        step = 'settle'
        record['settle'] = pack.settle(database, where, args)

        step = 'first request'
        record['first_request'] = requests(config, 'without a cache file')
        step = 'fill cache'
        entries = min(args.cache_entries, manifest['current_objects'])
        record['fill_cache'] = side.json(
            'fill-cache', cached, '--entries', entries, '--cache-dir',
            cache_dir, timeout=timeout)
        log(f'{where}: {record["fill_cache"]["entries"]:,} cache entries '
            f'written, files {record["fill_cache"]["files"]}')
        record['cached_request'] = requests(cached, 'with the cache file')

        step = 'writer alone'
        record['writer_alone'] = pack.writer_alone(
            side, config, f'{tag}-alone', args, WORK)
        step = 'first pack'
        pack_with_writer('pack1')
        size('pack1')
        step = 'grow'
        record['grow'] = side.json('grow', config, '--fraction', args.grow,
                                   '--seed', args.seed, timeout=timeout)
        size('grown')
        record['settle_grown'] = pack.settle(database, where, args)
        step = 'second pack'
        pack_with_writer('pack2')
        size('pack2')
        step = 'reclaim'
        record['reclaim'] = reclaim(database, backend, name, mode)
        log(f'{where}: {record["reclaim"]["statement"]}: '
            f'{record["reclaim"]["seconds"]:.0f}s')
        size('reclaimed')
        step = 'check'
        record['check'] = side.json('check', config, '--seed', args.seed,
                                    timeout=timeout)
        if not record['check']['ok']:
            raise WorkloadFailed(f'check: {record["check"]}')
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

CACHE_READ = re.compile(r'(\d+) of (\d+) objects read back .* in '
                        r'([\d.]+)s')
#: Ours, a large file: checked before the storage opens, read back after.
CACHE_CHECKED = re.compile(r'checked in ([\d.]+)s')


def cache_read(runs):
    """Ours: (entries read back, seconds) from the storage's log line of
    each run; None for a side that logs no such line."""
    found = [CACHE_READ.search(line) for r in runs
             for line in r.get('cache_log', ())]
    found = [m for m in found if m]
    if not found:
        return None
    return (max(int(m.group(1)) for m in found),
            max(float(m.group(3)) for m in found))


def cache_checked(runs):
    """Ours, a file read back in the background: the slowest check before
    the storage opened; None where no run logged one."""
    found = [CACHE_CHECKED.search(line) for r in runs
             for line in r.get('cache_log', ())]
    found = [float(m.group(1)) for m in found if m]
    return max(found) if found else None


def figures(record):
    """The figures of one side's record (None where a step did not run)."""
    out = {}
    if 'convert' in record:
        out.update({'convert_' + k: v for k, v in record['convert'].items()})
    for key in ('first_request', 'cached_request'):
        runs = record.get(key)
        if runs:
            out[key] = median([r['since_process_start'] for r in runs])
            out[key + '_max'] = max(r['since_process_start'] for r in runs)
            out[key + '_open'] = max(r['open_seconds'] for r in runs)
    read = cache_read(record.get('cached_request') or [])
    if read:
        out['cache_entries_read'], out['cache_read_seconds'] = read
    checked = cache_checked(record.get('cached_request') or [])
    # What the storage's open waited for: the file's check, or (read back
    # before the open) the whole read back.
    out['cache_open_seconds'] = checked if checked is not None else (
        read[1] if read else None)
    if 'fill_cache' in record:
        out['cache_entries'] = record['fill_cache']['entries']
        out['cache_file_bytes'] = sum(record['fill_cache']['files'].values())
    for step in ('pack1', 'pack2'):
        if step in record:
            for k in ('seconds', 'us_per_row', 'peak_rss_mb', 'rows_before'):
                out[f'{step}_{k}'] = record[step][k]
        writer = record.get(f'writer_{step}')
        if writer:
            out[f'{step}_writer_p99'] = writer['latency']['p99']
    if 'writer_alone' in record:
        out['writer_alone_p99'] = record['writer_alone']['latency']['p99']
    out['sizes'] = record.get('sizes', {})
    if 'reclaim' in record:
        out['reclaim_seconds'] = record['reclaim']['seconds']
    out['check_ok'] = record.get('check', {}).get('ok')
    return out


def ms(value):
    return '-' if value is None else f'{value * 1000:.1f} ms'


def num(value, unit='', digits=1):
    return '-' if value is None else f'{value:,.{digits}f}{unit}'


def gb(value):
    return '-' if value is None else f'{value / 1e9:.2f} GB'


def table(backend, mode, records, baseline):
    """The report's lines for one cell, and its checks."""
    impls = list(records)
    f = {impl: figures(r) for impl, r in records.items()}
    base = {impl: baseline.get(backend, {}).get(mode, {}).get(impl)
            for impl in impls}

    def row(label, key, fmt):
        return [label] + [fmt(f[i].get(key)) for i in impls]

    def size(step):
        return [f'disk, {step}'] + [gb(f[i]['sizes'].get(step))
                                    for i in impls]
    rows = [
        row('zodbconvert, s', 'convert_seconds', num),
        row('records per second', 'convert_records_per_second',
            lambda v: num(v, digits=0)),
        row('zodbconvert peak RSS', 'convert_peak_rss_mb',
            lambda v: num(v, ' MB', 0)),
        row('first request, median', 'first_request', lambda v: num(v, ' s',
                                                                     2)),
        row('first request, slowest', 'first_request_max',
            lambda v: num(v, ' s', 2)),
        row('cache entries in the file', 'cache_entries',
            lambda v: num(v, '', 0)),
        row('cache file', 'cache_file_bytes', gb),
        row('cache file checked, storage opening', 'cache_open_seconds',
            lambda v: num(v, ' s', 2)),
        row('cache read back (ours: in the background)',
            'cache_read_seconds', lambda v: num(v, ' s', 2)),
        row('storage opened, with the file', 'cached_request_open',
            lambda v: num(v, ' s', 2)),
        row('first request with it, slowest', 'cached_request_max',
            lambda v: num(v, ' s', 2)),
        row('writer p99, alone', 'writer_alone_p99', ms),
    ]
    for step, label in (('pack1', 'first pack'), ('pack2', 'second pack')):
        rows += [
            row(f'{label}, rows before', f'{step}_rows_before',
                lambda v: num(v, '', 0)),
            row(f'{label}, s', f'{step}_seconds', num),
            row(f'{label}, us per row', f'{step}_us_per_row', num),
            [f'{label}, vs baseline'] + [
                num(f[i].get(f'{step}_us_per_row') / base[i][
                    f'{step}_us_per_row'], 'x', 2)
                if base[i] and f[i].get(f'{step}_us_per_row') else '-'
                for i in impls],
            row(f'{label}, peak RSS', f'{step}_peak_rss_mb',
                lambda v: num(v, ' MB', 0)),
            row(f'{label}, writer p99', f'{step}_writer_p99', ms),
        ]
    rows += [size(s) for s in ('converted', 'pack1', 'grown', 'pack2',
                               'reclaimed')]
    rows += [row('space given back, s', 'reclaim_seconds', num),
             row('check', 'check_ok', lambda v: {True: 'ok', False: 'FAILED',
                                                 None: '-'}[v])]
    lines = [f'{TITLES[backend]}, {MODES[mode][0]}', '']
    lines += render(['figure'] + [LABELS[i] for i in impls], rows,
                    right_from=1)
    for impl, record in records.items():
        if 'error' in record:
            lines.append(f'{LABELS[impl]} FAILED: {record["error"]}')
    lines.append('')
    checks = []
    ours = f.get('ours')
    if ours:
        cell = f'{TITLES[backend]} {mode}'

        def check(what, value, limit, unit):
            checks.append({'where': cell, 'label': what, 'value': value,
                           'limit': limit, 'unit': unit,
                           'ok': None if value is None else value <= limit})
        check('zodbconvert peak RSS', ours.get('convert_peak_rss_mb'),
              CONVERT_RSS_MB, ' MB')
        check('first request', ours.get('first_request_max'),
              FIRST_REQUEST_S, ' s')
        check('cache file opened and checked',
              ours.get('cache_open_seconds'), CACHE_OPEN_S, ' s')
        check('first request with the cache file',
              ours.get('cached_request_max'), FIRST_REQUEST_S, ' s')
        for step in ('pack1', 'pack2'):
            check(f'{step} peak RSS', ours.get(f'{step}_peak_rss_mb'),
                  PACK_RSS_MB, ' MB')
            if base['ours'] and ours.get(f'{step}_us_per_row'):
                check(f'{step} time per row over the baseline\'s',
                      ours[f'{step}_us_per_row']
                      / base['ours'][f'{step}_us_per_row'],
                      PER_ROW_GROWTH, 'x')
    return lines, checks


# -- main ----------------------------------------------------------------

def parse_cells(parser, text):
    cells = []
    for item in text.split(','):
        backend, _, mode = item.strip().partition(':')
        if backend not in pack.BACKENDS or mode not in MODES:
            parser.error(f'--cells: {item!r} is not BACKEND:MODE '
                         f'({", ".join(pack.BACKENDS)}; hp, hf)')
        cells.append((backend, mode))
    return cells


def parse_args(argv):
    parser = Parser('A site of ten million objects: zodbconvert, a new '
                    "process's first request, the persistent cache, two "
                    'packs with a writer, the space given back.')
    parser.add_argument('--cells', default='postgresql:hp,mysql:hf',
                        help='comma-separated BACKEND:MODE (default '
                        'postgresql:hp,mysql:hf)')
    parser.choice('sides', IMPLS, default='ours',
                  help='comma-separated: ours, ref (RS 4.3); default ours')
    parser.scaled('--objects', 10_000_000, 20_000,
                  help='objects in the source (default 10,000,000; 20,000 '
                  'with --quick)')
    parser.quick()
    parser.add_argument('--seed', type=int, default=1)
    parser.scaled('--cache-entries', 1_000_000, 5_000,
                  help='entries of the persistent cache file (default '
                  '1,000,000)')
    parser.add_argument('--cache-mb', type=int, default=2000,
                        help='cache-local-mb while the cache is filled and '
                        'read back (default 2000)')
    parser.add_argument('--grow', type=float, default=0.1)
    parser.scaled('--writer-seconds', 30, 5, type=float)
    parser.add_argument('--writer-pause', type=float, default=0.02)
    parser.add_argument('--baseline', help="a results file of this script "
                        "at a smaller --objects: each pack's time per row "
                        'is compared with its')
    parser.add_argument('--timeout', type=float, default=12 * 3600)
    parser.servers(sqlite_synchronous=False)
    parser.results('scale.json', 'scale-quick.json',
                   keep_help='keep the databases, configs and logs')
    args = parser.parse(argv)
    args.cells = parse_cells(parser, args.cells)
    # What convert.py's source and pack.py's Side read.
    args.oids, args.shape, args.undo_adds = args.objects, 'scale', False
    args.regenerate = False
    args.ours_zodbpack = args.ref_zodbpack = None
    return args


def main(argv=None):
    import json
    args = parse_args(argv)
    started = time.monotonic()
    probes = prepare(args.sides, HERE / 'workload.py', log)
    names = {b for b, _ in args.cells}
    databases = {b: backends.database_for(b, args) for b in sorted(names)}
    env = environment({b: d.server_version() for b, d in databases.items()},
                      probes)
    WORK.mkdir(parents=True, exist_ok=True)
    baseline = {}
    if args.baseline:
        baseline = json.loads(Path(args.baseline).read_text())['summary']
    source, manifest = convert.ensure_source(args)
    lines = heading(env) + convert.describe_source(source, manifest) + [
        f'Writer: one small commit, then {args.writer_pause:g}s pause; '
        f'alone {args.writer_seconds:g}s; grow +{args.grow:.0%} of the '
        f'documents; packs to now.'
        + (f'  Baseline: {args.baseline}.' if args.baseline else ''), '']
    show(lines)
    results, checks = {}, []

    def write(tail, partial):
        write_results(args.json, {
            'environment': finish(env),
            'settings': {k: getattr(args, k) for k in (
                'cells', 'sides', 'objects', 'quick', 'seed',
                'cache_entries', 'cache_mb', 'grow', 'writer_seconds',
                'writer_pause', 'baseline')},
            'source': {k: v for k, v in manifest.items() if k != 'samples'},
            'results': results,
            'summary': {b: {m: {impl: figures(r)
                                for impl, r in records.items()}
                            for m, records in modes.items()}
                        for b, modes in results.items()},
            'checks': checks,
            'elapsed_seconds': time.monotonic() - started,
            # Written after each side too: a run of hours that is stopped
            # keeps what it measured.
            'partial': partial,
            'report': '\n'.join(lines + tail)})

    for backend, mode in args.cells:
        database = databases[backend]
        records = results.setdefault(backend, {})[mode] = {}
        for impl in IMPLS:
            if impl in args.sides:
                records[impl] = one_side(Side(impl, backend, args), database,
                                         backend, mode, source, manifest,
                                         args)
                write([], True)
        text, found = table(backend, mode, records, baseline)
        checks += found
        show(text, lines)
    tail = target_lines(
        checks, lambda c: num(c['value'], c['unit'], 2),
        lambda c: f'at most {c["limit"]:g}{c["unit"]}')
    sources = [r.get('src') for modes in results.values()
               for records in modes.values() for r in records.values()]
    tail = sources_warning(sources) + tail + run_time(started)
    show(tail)
    write(tail, False)
    if not args.keep_data:
        for path in sorted(WORK.rglob('*'), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        WORK.rmdir()
    failed = any('error' in r for modes in results.values()
                 for records in modes.values() for r in records.values())
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
