"""Conversion: our zodbconvert against RelStorage 4.3's, side by side in one
run.

    .venv/bin/python benchmarks/convert.py [--backends sqlite,postgresql,mysql]
        [--modes hp,hf] [--sides ours,ref] [--objects 100000] [--quick]

The source is a FileStorage with a blob directory, made once per
``--objects`` and ``--seed`` by ``convert_workload.py generate`` (the
project's interpreter, ZODB only) and kept under
``benchmarks/data/convert/`` for the next run (made again when missing or
made by another version of the generator): documents added to folders in
transactions of 10-20, edits of earlier documents (several revisions per
object), removals from folders, an undo now and then, a blob on about one
document in 150.

For each backend, history mode and side, on a fresh database
(``convertbench_<side>_<mode>``) and a fresh blob directory, the side's
``zodbconvert`` (the script next to its interpreter) copies the source
into it, from a config file with ``<filestorage source>`` (``read-only
true``) and ``<relstorage destination>`` (``shared-blob-dir false``): the
process's wall time (start-up included) and its peak RSS (``os.wait4``),
as records and transactions of the source per second.  Then, untimed:

* the destination's rows are counted: every record of the source in
  ``object_state`` and every transaction in the transaction table
  (``transaction_log`` for ours, ``transaction`` for 4.3) when it keeps
  history; the source's current objects (with a state) when it does not;
* ``convert_workload.py check``, in the side's interpreter, opens the
  destination and compares its last transaction, a sample of records and
  of blobs with the source;
* ours only (``--no-verify`` skips it): ``zodbconvert --verify``, which
  compares every transaction and record (history-free: every current
  record) and blob.

The sides alternate (ABBA... over the cells and the ``--repeat`` rounds),
so that neither always meets the machine as the other left it.  Targets:
ours converts at least twice as fast as RelStorage 4.3 on PostgreSQL and
MariaDB and at least as fast on SQLite; our zodbconvert process peaks
below 300 MB (10**6 bytes) of RSS (the target is set for the 100,000-object
source).  The environment, the reference venv and the databases are
the harness's (``harness/``), as for run.py; on MariaDB, RelStorage 4.3's zodbconvert runs with the patch of
mariadb_patch.py applied (``python -I -c``: ``mariadb_patch.apply()``, then
4.3's ``relstorage.zodbconvert.main()``, what its script calls), which the
report says.  RelStorage 4.3 cannot copy the default source into a
history-free database (``KNOWN_FAILURES``: the deletion records of undone
creations); ``--no-undo-adds`` makes a source without them.  With
``--round-trips`` or ``--rtt MS`` the destinations are reached through a
relay process per server, as in run.py, whose counts this script reads
before and after each zodbconvert process: the report adds its round trips
per record and per transaction of the source (SQLite is skipped).  See
README.rst.
"""
import json
import os
import shutil
import sys
import time
from pathlib import Path

from harness import DATA, backends, roundtrips
from harness.backends import (BACKENDS, MODES, TITLES, fresh_dir,
                              open_tables, relstorage_section)
from harness.cli import Parser
from harness.environment import (digest_after, environment, finish,
                                 sources_warning, src_digest)
from harness.figures import median
from harness.procs import WorkloadFailed, measured
from harness.report import (heading, log, patch_note, reference_patch,
                            render, run_time, show, target_lines, title,
                            write_results)
from harness.sides import IMPLS, LABELS, Side as BaseSide, Turns, prepare

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / 'convert_workload.py'
#: The generated sources, kept from one run to the next.
SOURCES = DATA / 'convert'
#: This run's configs, logs and blob directories.
WORK = SOURCES / f'run-{os.getpid()}'

#: The project's targets.
SPEEDUP = {'sqlite': 1.0, 'postgresql': 2.0, 'mysql': 2.0}
PEAK_RSS_MB = 300            # our zodbconvert process's peak RSS, below

#: RelStorage 4.3's zodbconvert on MariaDB: its script's main() after the
#: patch (``sys.argv[1:]`` is the config file, as for the script).
REF_PATCHED_MAIN = (
    'import sys; sys.path.insert(0, {here!r}); import mariadb_patch; '
    'mariadb_patch.apply(); from relstorage.zodbconvert import main; '
    'sys.exit(main())')

#: Failures explained under the table: (strings all in the error, why).
KNOWN_FAILURES = (
    (('record_iternext', 'POSKeyError'),
     "RelStorage 4.3 copies into a history-free database from the "
     "source's record_iternext(); FileStorage's raises POSKeyError at an "
     "object whose current record is a deletion (here the creations "
     "undone in the source); --no-undo-adds makes a source without "
     "them"),
)


# -- the source ----------------------------------------------------------

def source_shape(args):
    """``(shape, oids)``: convert_workload's ``--shape`` and ``--oids``
    (scale.py's source: a number of objects), or ``('default', None)``
    (this script's: ``args.objects`` documents)."""
    return getattr(args, 'shape', 'default'), getattr(args, 'oids', None)


def source_dir(args):
    shape, oids = source_shape(args)
    size = (f'{args.objects}' if shape == 'default' and not oids
            else f'{shape}-{oids or args.objects}')
    return SOURCES / (f'source-{size}-seed{args.seed}'
                      + ('' if args.undo_adds else '-no-undo-adds'))


def usable_source(path, args):
    """The manifest of a source made before by this generator, or None."""
    import convert_workload
    try:
        manifest = json.loads((path / 'manifest.json').read_text())
    except (OSError, ValueError):
        return None
    data = path / 'Data.fs'
    shape, oids = source_shape(args)
    if (manifest.get('version') != convert_workload.GENERATOR_VERSION
            or manifest.get('shape', 'default') != shape
            or manifest.get('oids_wanted') != oids
            or manifest.get('undo_adds') != args.undo_adds
            or not (path / 'Data.fs.index').exists()
            or not (path / 'blobs').is_dir()
            or not data.exists()
            or data.stat().st_size != manifest.get('file_bytes')):
        return None
    return manifest


def ensure_source(args):
    """The source's directory and manifest, generated when missing."""
    path = source_dir(args)
    manifest = None if args.regenerate else usable_source(path, args)
    if manifest is not None:
        log(f'source: reusing {path}')
        return path, dict(manifest, reused=True)
    shutil.rmtree(path, ignore_errors=True)
    building = path.with_name(f'{path.name}.tmp-{os.getpid()}')
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    shape, oids = source_shape(args)
    size = (['--oids', oids] if oids else ['--objects', args.objects])
    unit = 'objects' if oids else 'documents'
    log(f'source: generating {size[1]:,} {unit} (seed {args.seed}, '
        f'shape {shape}) into {path}')
    words = (['--dir', building, '--seed', args.seed, '--shape', shape]
             + size + ([] if args.undo_adds else ['--no-undo-adds']))
    try:
        BaseSide('ours', workload=WORKLOAD).run(
            'generate', *words, timeout=args.timeout, stdout_json=True,
            relay='generate')
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    # Left by FileStorage; nothing reads them.
    for leftover in ('Data.fs.lock', 'Data.fs.tmp'):
        (building / leftover).unlink(missing_ok=True)
    building.rename(path)
    manifest = usable_source(path, args)
    if manifest is None:
        raise SystemExit(f'the source generated in {path} is incomplete')
    return path, dict(manifest, reused=False)


def describe_source(path, manifest):
    m = manifest
    made = ('reused from an earlier run' if m['reused'] else
            f'generated in {m["generated_seconds"]:.1f}s')
    g = m['generator']
    return [
        f'Source: FileStorage {path} ({made}): {m["objects"]:,} '
        f'documents added (seed {m["seed"]}), {g["edited"]:,} edits, '
        f'{g["removed"]:,} removed from their folders, {g["undone"]} '
        f'transactions undone'
        + ('.' if m['undo_adds'] else ' (edits only: --no-undo-adds).'),
        f'  {m["transactions"]:,} transactions, {m["records"]:,} data '
        f'records ({m["deletion_records"]:,} deletions, '
        f'{m["backpointer_records"]:,} undo back-pointers), '
        f'{m["oids"]:,} objects ({m["current_objects"]:,} with a current '
        f'state); states {m["state_bytes"] / 1e6:,.1f} MB, Data.fs '
        f'{m["file_bytes"] / 1e6:,.1f} MB.',
        f'  Blobs: {m["blob_records"]:,} blob records, '
        f'{m["blob_bytes"] / 1e6:,.1f} MB ({m["current_blobs"]:,} current, '
        f'{m["current_blob_bytes"] / 1e6:,.1f} MB).']


# -- one side ------------------------------------------------------------

class Side(BaseSide):
    """One implementation on one backend, convert_workload.py in its
    interpreter, and its zodbconvert."""

    def __init__(self, impl, backend):
        super().__init__(impl, backend, WORKLOAD)
        self.script_path = self.script('zodbconvert')
        if self.flags:
            # RelStorage 4.3 on MariaDB: the patch first, then what its
            # script runs.
            self.zodbconvert = [self.python, '-I', '-c',
                                REF_PATCHED_MAIN.format(here=str(HERE))]
            self.how = ('python -I -c "mariadb_patch.apply(); '
                        'relstorage.zodbconvert.main()"')
        else:
            self.zodbconvert = [self.script_path]
            self.how = str(self.script_path)

    def check(self, config, source, mode, timeout):
        result = self.run('check', config, '--source-dir', source,
                          '--mode', mode, timeout=timeout, stdout_json=True,
                          relay=f'{self.impl} check')
        result.pop('info', None)
        return result


def convert_zconfig(database, impl, name, mode, source, blob_dir):
    """The config file of both zodbconverts."""
    return (
        '%import relstorage\n'
        '<filestorage source>\n'
        f'  path {source / "Data.fs"}\n'
        f'  blob-dir {source / "blobs"}\n'
        '  read-only true\n'
        '</filestorage>\n'
        + destination_zconfig(database, impl, name, mode, blob_dir,
                              'destination'))


def destination_zconfig(database, impl, name, mode, blob_dir, section=''):
    return relstorage_section(database, impl, name, MODES[mode][1],
                              [f'blob-dir {blob_dir}',
                               'shared-blob-dir false'], section)


def destination_counts(database, backend, name, mode, manifest):
    """The rows of the destination, and whether they hold what the source
    does: history-preserving, one object_state row per record (ours keeps
    a transaction's earlier records of one object in superseded_state) and
    one row per transaction in the transaction table (ours
    ``transaction_log``, 4.3 ``transaction``, which also holds a row of
    tid 0 of its own); history-free, one row with a state per current
    object."""
    conn, tables, quote = open_tables(database, backend, name)
    try:
        cur = conn.cursor()

        def count(table, where=''):
            # The names come from the catalogue, not from input.
            cur.execute(f'SELECT COUNT(*) FROM {quote.format(table)}{where}')
            return cur.fetchone()[0]
        out = {'rows': {table: count(table) for table in tables}}
        rows = out['rows']
        if MODES[mode][1]:
            txn_table = ('transaction_log' if 'transaction_log' in tables
                         else 'transaction')
            out['transaction_table'] = txn_table
            out['transactions'] = (count(txn_table, ' WHERE tid > 0')
                                   if txn_table in tables else None)
            out['records'] = (rows.get('object_state', 0)
                              + rows.get('superseded_state', 0))
            wanted = {'records': manifest['records'],
                      'transactions': manifest['transactions']}
        else:
            out['records'] = count('object_state',
                                   ' WHERE state IS NOT NULL')
            wanted = {'records': manifest['current_objects']}
        conn.rollback()
    finally:
        conn.close()
    out['expected'] = wanted
    out['ok'] = all(out.get(key) == value for key, value in wanted.items())
    return out


def one_run(side, database, backend, mode, source, manifest, args, tag,
            relays=None):
    """One conversion into a fresh database, then its checks; returns its
    record (with ``error`` when a step failed: the steps before it
    stand).  With ``relays`` (counting round trips), the conversion's
    round trips are read from the relay before and after it."""
    name = f'convertbench_{side.impl}_{mode}'
    blob_dir = fresh_dir(WORK / f'{tag}-blobs')
    check_blobs = WORK / f'{tag}-check-blobs'
    config = WORK / f'{tag}.conf'
    config.write_text(convert_zconfig(database, side.impl, name, mode,
                                      source, blob_dir))
    check_config = WORK / f'{tag}-check.conf'
    check_config.write_text('%import relstorage\n' + destination_zconfig(
        database, side.impl, name, mode, check_blobs))
    record = {'tag': tag, 'database': name, 'config': str(config),
              'how': side.how,
              'src': src_digest() if side.impl == 'ours' else None}
    where = f'{TITLES[backend]} {mode} {side.label}'
    step = 'create'
    try:
        try:
            database.create(name)
        except (WorkloadFailed, OSError):
            raise
        except Exception as e:     # the driver's errors
            raise WorkloadFailed(f'{type(e).__name__}: {e}')
        step = 'convert'
        log(f'{where}: zodbconvert ({manifest["records"]:,} records)')
        before = relays.counts(backend) if relays else None
        seconds, rss = measured(side.zodbconvert + [config],
                                    WORK / f'{tag}.log', args.timeout)
        relay = roundtrips.difference(
            before, before and relays.counts(backend),
            record=manifest['records'], transaction=manifest['transactions'])
        # run_measured gives MiB; the target is in MB.
        record['convert'] = {'seconds': seconds,
                             'peak_rss_mb': rss * 2**20 / 1e6,
                             'log': str(WORK / f'{tag}.log'),
                             'command': ' '.join(
                                 str(c) for c in side.zodbconvert)}
        record['convert']['log_tail'] = (
            WORK / f'{tag}.log').read_text().strip().splitlines()[-3:]
        if relay:
            record['convert']['relay'] = relay
        log(f'{where}: converted in {seconds:.1f}s '
            f'({manifest["records"] / seconds:,.0f} records/s), peak RSS '
            f'{record["convert"]["peak_rss_mb"]:.0f} MB')

        step = 'count'
        try:
            record['counts'] = destination_counts(database, backend, name,
                                                  mode, manifest)
        except WorkloadFailed:
            raise
        except Exception as e:     # the driver's errors
            raise WorkloadFailed(f'{type(e).__name__}: {e}')
        if not record['counts']['ok']:
            log(f'{where}: the destination\'s rows do not match the '
                f'source: {record["counts"]}')

        step = 'check'
        fresh_dir(check_blobs)
        record['check'] = side.check(check_config, source, mode,
                                     args.timeout)
        if not record['check']['ok']:
            log(f'{where}: check found differences: '
                f'{record["check"]["problems"]}')

        if side.impl == 'ours' and args.verify:
            step = 'verify'
            log(f'{where}: zodbconvert --verify (untimed)')
            logfile = WORK / f'{tag}-verify.log'
            try:
                seconds, rss = measured(
                    side.zodbconvert + ['--verify', config], logfile,
                    args.timeout)
                record['verify'] = {'ok': True, 'seconds': seconds,
                                    'peak_rss_mb': rss * 2**20 / 1e6}
            except WorkloadFailed as e:
                record['verify'] = {'ok': False, 'output': str(e)}
                log(f'{where}: zodbconvert --verify FAILED:\n{e}')
    except (WorkloadFailed, RuntimeError, OSError) as e:
        record['error'] = f'{step}: {e}'
        log(f'  FAILED: {where}: {step}:\n{e}')
    finally:
        if not args.keep_data:
            try:
                database.drop(name)
            except Exception as e:     # noqa: BLE001 (reported, not fatal)
                log(f'  could not drop {name}: {e}')
            shutil.rmtree(blob_dir, ignore_errors=True)
            shutil.rmtree(check_blobs, ignore_errors=True)
    if side.impl == 'ours':
        record['src'] = digest_after(record['src'])
    return record


def correct(record):
    """Whether a run's copy was found right: None when not checked."""
    if 'error' in record:
        return False
    parts = [record.get(key, {}).get('ok')
             for key in ('counts', 'check', 'verify')]
    parts = [p for p in parts if p is not None]
    return all(parts) if parts else None


# -- figures and report --------------------------------------------------

def figures(entry, manifest):
    """The figures of one side in one cell (None where it has none)."""
    runs = [r['convert'] for r in entry['runs'] if 'convert' in r]
    if not runs:
        return {'seconds': None, 'records_s': None, 'transactions_s': None,
                'peak_rss_mb': None, 'runs': 0, 'correct': False}
    seconds = median(r['seconds'] for r in runs)
    out = {'seconds': seconds,
           'records_s': manifest['records'] / seconds,
           'transactions_s': manifest['transactions'] / seconds,
           'peak_rss_mb': max(r['peak_rss_mb'] for r in runs),
           'runs': len(runs),
           'correct': all(correct(r) is not False for r in entry['runs'])}
    trips = roundtrips.medians(r.get('relay') for r in runs)
    if trips:
        out['round_trips'] = trips
    return out


def check_text(entry):
    states = [correct(r) for r in entry['runs']]
    if not states:
        return '-'
    if any(s is False for s in states):
        failed = [r for r in entry['runs'] if 'error' in r]
        return 'FAILED' if failed else 'WRONG'
    return 'ok' if all(s for s in states) else 'n/a'


def num(value, digits=0):
    return '-' if value is None else f'{value:,.{digits}f}'


def seconds_text(value):
    if value is None:
        return '-'
    return num(value, 2 if value < 10 else 1 if value < 100 else 0)


def table(backend, mode, cell, manifest):
    """The lines of one backend and mode, and its checks (``ok`` None: not
    measured, a side having failed)."""
    got = {impl: figures(cell[impl], manifest) for impl in cell}
    ours, ref = got.get('ours'), got.get('ref')
    where = f'{TITLES[backend]} {mode}'
    want = SPEEDUP[backend]
    ratio = (ref['seconds'] / ours['seconds']
             if ours and ref and ours['seconds'] and ref['seconds']
             else None)
    checks = []
    if ours and ref:
        checks.append({'where': where, 'figure': 'speed',
                       'label': 'conversion time, RS 4.3 / ours',
                       'value': ratio, 'target': f'>={want:g}',
                       'ok': None if ratio is None else ratio >= want})
    if ours:
        rss = ours['peak_rss_mb']
        checks.append({'where': where, 'figure': 'peak_rss',
                       'label': 'our zodbconvert peak RSS (MB)',
                       'value': rss, 'target': f'<{PEAK_RSS_MB:g}',
                       'ok': None if rss is None else rss < PEAK_RSS_MB})
    header = ('side', 'seconds', 'records/s', 'txns/s', 'peak RSS MB',
              'ratio', 'target', 'verdict', 'copy')
    rows = []
    for impl in (i for i in IMPLS if i in got):
        f = got[impl]
        if impl == 'ours':
            misses = [c['figure'].replace('_', ' ') for c in checks
                      if c['ok'] is False]
            unknown = [c['figure'].replace('_', ' ') for c in checks
                       if c['ok'] is None]
            verdict = ', '.join(
                (['MISS ' + ', '.join(misses)] if misses else
                 ['ok'] if len(unknown) < len(checks) else [])
                + [f'{u} n/a' for u in unknown])
            row_ratio = '-' if ratio is None else f'{ratio:.2f}'
            target = f'>={want:g}x, <{PEAK_RSS_MB} MB'
        else:
            verdict = row_ratio = target = ''
        rows.append((LABELS[impl], seconds_text(f['seconds']),
                     num(f['records_s']), num(f['transactions_s']),
                     num(f['peak_rss_mb']), row_ratio, target, verdict,
                     check_text(cell[impl])))
    lines = title(f'{TITLES[backend]}, {MODES[mode][0]} (keep-history '
                         f'{"true" if MODES[mode][1] else "false"})')
    lines += render(header, rows, right_from=1)
    for impl in (i for i in IMPLS if i in cell):
        lines += run_notes(impl, cell[impl])
    lines.append(f'records/s and txns/s: the source\'s '
                 f'{manifest["records"]:,} records and '
                 f'{manifest["transactions"]:,} transactions over the '
                 f'zodbconvert process\'s wall time; ratio: RS 4.3 time / '
                 f'ours (> 1: ours is faster).')
    lines += round_trip_lines(got)
    if not MODES[mode][1]:
        lines.append('history-free: both write the current record of each '
                     'object only; RS 4.3 reads them with the source\'s '
                     'record_iternext(), ours walks the transactions and '
                     'keeps the records still current.')
    return lines + [''], checks


def round_trip_lines(got):
    """The round trips of each side's zodbconvert per record and per
    transaction of the source, and ours / RS 4.3 (< 1.0: ours makes
    fewer); nothing when they were not counted."""
    trips = {impl: (f or {}).get('round_trips') for impl, f in got.items()}
    if not any(trips.values()):
        return []
    ours, ref = trips.get('ours') or {}, trips.get('ref') or {}
    rows = []
    for unit in ('record', 'transaction'):
        o, r = ours.get(unit), ref.get(unit)
        rows.append((f'per {unit}', roundtrips.fmt(o), roundtrips.fmt(r),
                     f'{o / r:.2f}' if o is not None and r else '-'))
    return ['', 'Round trips of the whole zodbconvert process (its '
            'connections and the schema included; through the relay):',
            ''] + render(('', 'ours', 'RS 4.3', 'ours/4.3'),
                                    rows, right_from=1)


def run_notes(impl, entry):
    label = LABELS[impl]
    out = []
    for index, r in enumerate(entry['runs']):
        run_label = (label if len(entry['runs']) == 1
                     else f'{label} run {index + 1}')
        if impl == 'ref' and r.get('how', '').startswith('python'):
            out.append(f'{run_label}: zodbconvert run as {r["how"]} (the '
                       f'MariaDB patch).')
        c = r.get('counts')
        if c:
            parts = [f'{c["records"]:,} records (expected '
                     f'{c["expected"]["records"]:,})']
            if 'transactions' in c['expected']:
                parts.append(f'{c["transactions"]:,} rows in '
                             f'{c["transaction_table"]} (expected '
                             f'{c["expected"]["transactions"]:,})'
                             if c['transactions'] is not None else
                             f'no {c["transaction_table"]} table')
            out.append(f'{run_label}: destination rows: {", ".join(parts)}:'
                       f' {"ok" if c["ok"] else "WRONG"}')
        k = r.get('check')
        if k:
            text = ('ok' if k['ok'] else
                    'DIFFERENT: ' + '; '.join(k['problems'][:3]))
            out.append(f'{run_label}: last tid {k["last_tid"]}, '
                       f'{k["records_compared"]} sampled records and '
                       f'{k["blobs_compared"]} blobs compared with the '
                       f'source: {text}')
        v = r.get('verify')
        if v:
            out.append(f'{run_label}: zodbconvert --verify: '
                       + (f'ok ({v["seconds"]:.1f}s)' if v['ok'] else
                          'FAILED: ' + v['output'].strip().splitlines()[-1]))
        if r.get('error'):
            # The last lines (the exception, the log's path); the whole
            # tail is in the JSON and was logged.
            step, _, text = r['error'].partition(': ')
            last = text.strip().splitlines()[-2:]
            out.append(f'{run_label} FAILED in {step}: ' + ' '.join(
                line.strip() for line in last))
            for marks, why in KNOWN_FAILURES:
                if all(mark in r['error'] for mark in marks):
                    out.append(f'  ({why})')
    return out


def verdicts(checks):
    return target_lines(
        checks,
        lambda c: '-' if c['value'] is None else f'{c["value"]:.2f}',
        lambda c: f'{c["target"]}')


# -- main ----------------------------------------------------------------

def parse_args(argv):
    parser = Parser('zodbconvert of a FileStorage into each database: '
                    'speed and memory against RelStorage 4.3.')
    parser.choice('backends', BACKENDS, help='comma-separated: sqlite, '
                  'postgresql, mysql (MariaDB)')
    parser.choice('modes', MODES, default='hp', help='comma-separated: hp '
                  '(history-preserving, the default), hf (history-free)')
    parser.choice('sides', IMPLS, help='comma-separated: ours, ref (RS 4.3)')
    parser.scaled('--objects', 100000, 5000, help='documents in the source '
                  '(default 100,000; 5,000 with --quick)')
    parser.quick()
    parser.add_argument('--seed', type=int, default=1)
    parser.repeat(1, help='conversions per side, backend and mode, each '
                  'into a fresh database, alternating the sides (default 1: '
                  'a run is long); the figures are the median time and the '
                  'highest peak RSS')
    parser.add_argument('--no-verify', dest='verify', action='store_false',
                        help='skip our zodbconvert --verify after each of '
                        'our conversions')
    parser.add_argument('--no-undo-adds', dest='undo_adds',
                        action='store_false',
                        help='a source whose undos are of edits only, '
                        'without the deletion records of undone creations '
                        '(RelStorage 4.3 cannot copy those into a '
                        'history-free database); cached apart')
    parser.add_argument('--regenerate', action='store_true',
                        help='make the source again even when a usable one '
                        'is cached')
    parser.add_argument('--timeout', type=float, default=6 * 3600,
                        help='seconds any one step may take (default 6 h)')
    # SQLite's synchronous is left to each side.
    parser.servers(sqlite_synchronous=False)
    parser.round_trips()
    parser.results('convert.json', keep_help='keep the databases, configs, '
                   'logs and blob directories of the run')
    args = parser.parse(argv)
    roundtrips.networked_only(parser, args)
    return args


def main(argv=None):
    args = parse_args(argv)
    with roundtrips.Relays(args.rtt) as relays:
        return run(args, relays)


def run(args, relays):
    started = time.monotonic()
    probes = prepare(args.sides, HERE / 'workload.py', log)
    for impl in args.sides:
        script = Side(impl, 'sqlite').script_path
        if not script.exists():
            raise SystemExit(f'{LABELS[impl]} has no zodbconvert '
                             f'script: {script}')
    databases = {b: backends.database_for(b, args) for b in args.backends}
    env = environment({b: d.server_version() for b, d in databases.items()},
                      probes)
    WORK.mkdir(parents=True, exist_ok=True)
    source, manifest = ensure_source(args)
    lines = heading(env) + describe_source(source, manifest) + ['']
    if 'mysql' in args.backends and 'ref' in args.sides:
        lines += patch_note(
            ' Here it is applied in RelStorage 4.3\'s zodbconvert process '
            'on MariaDB, which runs as python -I -c "import mariadb_patch; '
            'mariadb_patch.apply(); from relstorage.zodbconvert import '
            'main; sys.exit(main())" CONFIG (the function its zodbconvert '
            'script calls).')
    lines += [
        f'Each side\'s zodbconvert copies the source into a fresh database '
        f'and blob directory (shared-blob-dir false; the source read-only);'
        f' seconds are the process\'s wall time (start-up included), peak '
        f'RSS its ru_maxrss (os.wait4) in MB (10**6 bytes); '
        f'{args.repeat} conversion(s) per side, '
        + ('the median time.' if args.repeat > 1 else 'no repeat.')
        + ' "copy": the destination\'s rows counted against the source, '
        'a sample of records and blobs and the last tid compared'
        + (', and ours checked by zodbconvert --verify.' if args.verify
           else '.'), '']
    if relays.active:
        lines += [
            'Round trips: the destinations are reached through a relay '
            'process adding '
            + roundtrips.added_latency(args.rtt)
            + '; its counts are read before and after each zodbconvert '
            'process.'] + roundtrips.skipped_note(args.skipped) + ['']
    show(lines)

    results, checks = {}, []
    order = [impl for impl in IMPLS if impl in args.sides]
    turns = Turns()
    for backend, database in databases.items():
        database = relays.route(backend, database)
        for mode in args.modes:
            sides = [Side(impl, backend) for impl in order]
            cell = {side.impl: {'runs': []} for side in sides}
            for round_, side in turns.rounds(sides, args.repeat):
                tag = f'{backend}-{mode}-{side.impl}-{round_ + 1}'
                cell[side.impl]['runs'].append(one_run(
                    side, database, backend, mode, source, manifest, args,
                    tag, relays))
            results.setdefault(backend, {})[mode] = cell
            text, found = table(backend, mode, cell, manifest)
            checks += found
            show(text, lines)
    relays.stop()
    if not args.keep_data:
        remove_work(results)
    sources = [r.get('src') for modes in results.values()
               for cell in modes.values()
               for r in cell.get('ours', {}).get('runs', [])]
    tail = sources_warning(sources) + verdicts(checks) + run_time(started)
    show(tail)
    write_results(args.json, {
        'environment': dict(finish(env), src_digests=sorted(
            {s for s in sources if s})),
        'settings': {k: getattr(args, k) for k in (
            'backends', 'modes', 'sides', 'objects', 'quick', 'seed',
            'undo_adds', 'repeat', 'verify', 'round_trips', 'rtt',
            'skipped')},
        'relay': relays.describe() if relays.active else None,
        'source': dict({k: v for k, v in manifest.items()
                        if k != 'samples'}, path=str(source)),
        'results': results,
        'summary': {b: {m: {impl: figures(cell[impl], manifest)
                            for impl in cell}
                        for m, cell in modes.items()}
                    for b, modes in results.items()},
        'checks': checks,
        'reference_patch': (reference_patch(how=Side('ref', 'mysql').how)
                            if 'mysql' in args.backends
                            and 'ref' in args.sides else None),
        'elapsed_seconds': time.monotonic() - started,
        'report': '\n'.join(lines + tail)})
    failed = any(correct(r) is False for modes in results.values()
                 for cell in modes.values()
                 for r in cell.get('ours', {}).get('runs', []))
    return 1 if failed else 0


def remove_work(results):
    """This run's configs, logs and blob directories, but the logs of the
    failed steps (their errors name them)."""
    kept = {Path(r['convert']['log']).name if 'convert' in r else
            f'{r["tag"]}.log' for modes in results.values()
            for cell in modes.values() for entry in cell.values()
            for r in entry['runs'] if 'error' in r}
    kept |= {f'{r["tag"]}-verify.log' for modes in results.values()
             for cell in modes.values() for entry in cell.values()
             for r in entry['runs']
             if r.get('verify', {}).get('ok') is False}
    for path in WORK.iterdir():
        if path.name not in kept:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()
    if kept:
        log(f'the logs of the failed steps are kept in {WORK}')
    else:
        WORK.rmdir()


if __name__ == '__main__':
    sys.exit(main())
