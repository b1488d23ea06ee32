"""run.py's report: the figures it reports, their ratios, the project's
targets and whether each is met, the table per backend and mode, the table
of FileStorage and ZEO, the notes under them, and with ``--round-trips``
or ``--rtt`` a table of round trips per operation beside each backend and
mode's.

Everything here is computed from the measurements passed in; nothing is
decided in advance.  compare.py uses the same names and formatting.
"""
from harness import environment, roundtrips
from harness.backends import MODES, TITLES
from harness.report import heading, patch_note, render, target_lines, title
from harness.sides import IMPLS, LABELS

OTHERS = ('filestorage', 'zeo')

#: (key, label, kind): kind 'rate' is objects per second and 'commits'
#: commits per second (higher is better), 'latency' is milliseconds (lower
#: is better).  ``{n}`` in a label is the number of processes, ``{reads}``
#: and ``{writes}`` the mixed workload's per request (``label_of``).
METRICS = (
    ('add_100', 'add, 100 new objects/txn', 'rate'),
    ('add_1000', 'add, 1000 new objects/txn', 'rate'),
    ('update_1000', 'update, 1000 objects/txn', 'rate'),
    ('cold_read', 'cold read, new process', 'rate'),
    ('warm_read', 'warm read, storage cache', 'rate'),
    ('hot_read', 'hot read, ZODB cache', 'rate'),
    ('prefetch', 'prefetch 100, then read', 'rate'),
    ('load_single', 'cold single load, mean', 'rate'),
    ('load_single_p50', 'cold single load, p50', 'latency'),
    ('commit_p50', 'small commit, p50', 'latency'),
    ('commit_p90', 'small commit, p90', 'latency'),
    ('commit_p99', 'small commit, p99', 'latency'),
    ('conflicts', 'conflicting commits', 'commits'),
    ('mp_add', 'add 100/txn, {n} processes', 'rate'),
    ('mp_update', 'update 100/txn, {n} processes', 'rate'),
    ('mp_read', 'cold read, {n} processes', 'rate'),
    ('random_read', 'cold random read, 5 % by key', 'rate'),
    ('random_load', 'cold random read, storage time per load', 'latency'),
    ('random_prefetch', 'cold random read, prefetched', 'rate'),
    ('mixed', 'requests ({reads} reads, {writes}), {n} processes',
     'commits'),
)
UNITS = {'rate': 'obj/s', 'commits': 'commit/s', 'latency': 'ms'}

#: The round-trip table's rows: (phase, unit, label, the floor's phase and
#: unit that do the same with the bare driver, or None).  The workloads
#: record every unit of a phase (harness/roundtrips.py); these are the
#: ones shown.
ROUND_TRIP_ROWS = (
    ('add_100', 'object', 'add, 100 new objects/txn', 'add_100', 'object'),
    ('add_100', 'commit', '  the same, per commit', 'add_100', 'commit'),
    ('add_1000', 'object', 'add, 1000 new objects/txn', 'add_1000',
     'object'),
    ('add_1000', 'commit', '  the same, per commit', 'add_1000', 'commit'),
    ('update_1000', 'object', 'update, 1000 objects/txn', 'update_1000',
     'object'),
    ('update_1000', 'commit', '  the same, per commit', 'update_1000',
     'commit'),
    ('commit_latency', 'commit', 'small commit, its polls included',
     'commit_latency', 'commit'),
    ('conflicts', 'commit', 'conflicting commits, retries included', None,
     None),
    ('cold_read', 'object', 'cold read, new process', 'cold_read',
     'select'),
    ('cold_read', 'load', '  the same, per storage load', 'cold_read',
     'select'),
    ('warm_read', 'object', 'warm read, storage cache', None, None),
    ('hot_read', 'object', 'hot read, ZODB cache', None, None),
    ('prefetch', 'batch', 'prefetch 100, then read', None, None),
    ('load_single', 'load', 'cold single load', 'cold_read', 'select'),
    ('random_read', 'object', 'cold random read, 5 % by key', None, None),
    ('random_read', 'load', '  the same, per storage load', 'cold_read',
     'select'),
    ('random_prefetch', 'object', 'cold random read, prefetched', None,
     None),
    ('mp_add', 'object', 'add 100/txn, {n} processes', 'add_100', 'object'),
    ('mp_update', 'object', 'update 100/txn, {n} processes', None, None),
    ('mp_read', 'object', 'cold read, {n} processes', 'cold_read', 'select'),
    ('mixed', 'request',
     'requests ({reads} reads, {writes}), {n} processes', None,
     None),
)

#: The project's targets for ours against RelStorage 4.3 (how many times
#: faster), on the server databases; every other phase, and every phase
#: on SQLite, must be at least as fast (1.0).
WRITES = ('add_100', 'add_1000', 'update_1000', 'mp_add', 'mp_update')
COLD_READS = ('mp_read', 'random_read', 'mixed')
#: The sequential cold read, where read-ahead pays most: kept at least
#: three times as fast while read-ahead adapts to random reads.
SEQUENTIAL_READ = 'cold_read'
SERVER_BACKENDS = ('postgresql', 'mysql')
#: Cold single-object loads: at most this many times the bare driver's
#: SELECT by primary key, on the server databases.
FLOOR_TARGETS = {'load_single': 1.5, 'load_single_p50': 1.5,
                 'random_load': 1.5}


def target(backend, key):
    if backend not in SERVER_BACKENDS:
        return 1.0
    if key in WRITES:
        return 1.5
    if key in COLD_READS:
        return 1.3
    if key == SEQUENTIAL_READ:
        return 3.0
    return 1.0


def floor_target(backend, key):
    if backend not in SERVER_BACKENDS:
        return None
    return FLOOR_TARGETS.get(key)


def fmt(value, kind):
    if value is None:
        return '-'
    if kind == 'latency':
        return f'{value:.3f}' if value < 1 else f'{value:.2f}'
    return f'{value:,.0f}'


def as_seconds(value, kind):
    """The time one unit of work takes (lower is better)."""
    return value / 1000 if kind == 'latency' else 1 / value


def ratio(ours, other, kind):
    """How many times faster ours is (> 1.0: ours is faster)."""
    if not ours or not other:
        return None
    return as_seconds(other, kind) / as_seconds(ours, kind)


def times_floor(value, floor, kind):
    if not value or not floor:
        return None
    return as_seconds(value, kind) / as_seconds(floor, kind)


def label_of(label, shape):
    """``label`` for a run whose ``shape`` is its arguments (run.py's):
    the processes of the multi-process phases, the reads and writes of a
    mixed request (5 and 1 where a stored run predates them)."""
    writes = getattr(shape, 'mixed_writes', 1)
    return label.format(n=shape.processes,
                        reads=getattr(shape, 'mixed_reads', 5),
                        writes=f'{writes} write' + ('s' if writes > 1 else ''))


def backend_table(backend, where, title_text, metrics, floor, shape,
                  notes):
    """The table of one backend and history mode; returns its lines and
    the list of checks (one dict per target), each naming ``where``."""
    ours, ref = metrics.get('ours', {}), metrics.get('ref', {})
    header = ('phase', 'unit', 'ours', 'RS 4.3', 'ratio', 'target',
              'verdict', 'floor', 'ours/floor', '4.3/floor')
    rows, checks = [], []
    for key, label, kind in METRICS:
        o, r, low = ours.get(key), ref.get(key), floor.get(key)
        if o is None and r is None:
            continue
        label = label_of(label, shape)
        if key in notes:
            label = f'{label} ({notes[key]})'
        speedup = ratio(o, r, kind)
        fo, fr = times_floor(o, low, kind), times_floor(r, low, kind)
        want = target(backend, key)
        want_floor = floor_target(backend, key)
        verdict = []
        if r is not None:
            ok = speedup is not None and speedup >= want
            checks.append({'where': where, 'phase': key,
                           'label': label, 'against': 'RS 4.3',
                           'value': speedup, 'target': want, 'ok': ok})
            verdict.append('ok' if ok else 'MISS')
        if want_floor is not None and low is not None:
            ok = fo is not None and fo <= want_floor
            checks.append({'where': where, 'phase': key,
                           'label': label, 'against': 'floor',
                           'value': fo, 'target': want_floor, 'ok': ok})
            verdict.append('ok' if ok else 'MISS floor')
        wanted = f'>={want:.1f}'
        if want_floor is not None:
            wanted += f', <={want_floor:.1f}x fl'
        rows.append((label, UNITS[kind], fmt(o, kind), fmt(r, kind),
                     '-' if speedup is None else f'{speedup:.2f}', wanted,
                     ', '.join(v for v in verdict if v != 'ok') or
                     ('ok' if verdict else 'n/a'),
                     fmt(low, kind),
                     '-' if fo is None else f'{fo:.1f}x',
                     '-' if fr is None else f'{fr:.1f}x'))
    lines = title(title_text)
    lines += render(header, rows) if rows else ['(no figures)']
    return lines, checks


def round_trip_table(figures, floor, shape):
    """The round trips per operation of one backend and mode: ours, RS
    4.3, the floor doing the same with the bare driver, and ours / RS 4.3
    (< 1.0: ours makes fewer)."""
    ours, ref = figures.get('ours') or {}, figures.get('ref') or {}
    header = ('phase', 'per', 'ours', 'RS 4.3', 'floor', 'ours/4.3')
    rows = []
    for phase, unit, label, floor_phase, floor_unit in ROUND_TRIP_ROWS:
        o = ours.get(phase, {}).get(unit)
        r = ref.get(phase, {}).get(unit)
        if o is None and r is None:
            continue
        low = floor.get(floor_phase, {}).get(floor_unit)
        rows.append((label_of(label, shape), unit, roundtrips.fmt(o),
                     roundtrips.fmt(r), roundtrips.fmt(low),
                     f'{o / r:.2f}' if o is not None and r else '-'))
    lines = ['Round trips per operation (through the relay):', '']
    return lines + (render(header, rows) if rows else ['(none counted)'])


def round_trip_intro(args):
    """The lines that say how the round trips were counted."""
    added = (f'adding {args.rtt:g} ms to every round trip: every time below '
             f'includes it' if args.rtt else 'adding no latency (the times '
             'below include its own cost, about 0.05 ms a round trip)')
    return [f'Round trips: every connection of ours, RS 4.3 and the floor '
            f'to the database goes through a relay process {added}.  Its '
            f'counts are read at the start and the end of each phase; a '
            f'round trip is a client send that follows a server reply.  '
            f'The floor\'s select is one SELECT by primary key, each pass '
            f'of its reads ending with a COMMIT.'] + roundtrips.skipped_note(
                args.skipped) + ['']


def others_table(others, ours_by_run, shape):
    """FileStorage and ZEO, measured once per run, and how many times
    faster ours is than each, per backend and mode of the run."""
    fs, zeo = others.get('filestorage', {}), others.get('zeo', {})
    header = ['phase', 'unit', 'FileStorage', 'ZEO']
    header += [name for name in ours_by_run]
    rows = []
    for key, label, kind in METRICS:
        if key not in fs and key not in zeo:
            continue
        row = [label_of(label, shape), UNITS[kind], fmt(fs.get(key), kind),
               fmt(zeo.get(key), kind)]
        for metrics in ours_by_run.values():
            ours = metrics.get(key)
            parts = [ratio(ours, fs.get(key), kind),
                     ratio(ours, zeo.get(key), kind)]
            row.append('/'.join('-' if p is None else f'{p:.2f}'
                                for p in parts))
        rows.append(tuple(row))
    lines = title('FileStorage and ZEO (no database; measured once per '
                  'run)')
    lines += render(tuple(header), rows) if rows else ['(no figures)']
    if ours_by_run:
        lines.append('Columns after ZEO: ours on that backend and mode, how '
                     'many times faster than FileStorage / than ZEO.')
    return lines


def summary(checks):
    """Which targets are met, computed from the checks of every table: the
    count, then every miss."""
    def value(c):
        v = '-' if c['value'] is None else f'{c["value"]:.2f}'
        return f'ours/floor {v}x' if c['against'] == 'floor' else f'ratio {v}'

    def wanted(c):
        return (f'<= {c["target"]:.1f}x' if c['against'] == 'floor'
                else f'>= {c["target"]:.1f}')
    return target_lines(checks, value, wanted, missed_only=True)


def conflict_notes(cell):
    """Lines under a table: the failed phases of each side, and what the
    conflict phase resolved and retried."""
    out = []
    for impl in IMPLS + OTHERS:
        entry = cell.get(impl)
        if not entry:
            continue
        for phase, error in entry.get('errors', {}).items():
            out.append(f'{LABELS[impl]} FAILED in {phase}: '
                       + error.strip().splitlines()[-1])
        runs = [w['phases']['conflicts'] for w in entry['writes']
                if 'conflicts' in w['phases']]
        broken = [r for r in runs if 'error' in r]
        if broken:
            out.append(f'{LABELS[impl]}: conflicting commits FAILED in '
                       f'{len(broken)} of {len(runs)} runs: '
                       f'{broken[0]["error"]}')
        done = [r for r in runs if 'error' not in r]
        if done:
            retries = {}
            for r in done:
                for kind, n in r['retries'].items():
                    retries[kind] = retries.get(kind, 0) + n
            resolved = sum(r['resolved'] or 0 for r in done)
            shown = ', '.join(f'{k} {v / len(done):.0f}'
                              for k, v in sorted(retries.items()))
            out.append(f'{LABELS[impl]}: conflicting commits, per run: '
                       f'{resolved / len(done):.0f} objects resolved at '
                       f'vote; retries: {shown or "none"}')
    return out


def load_line(cell):
    first, last = cell['load_average']
    return (f'load average (1 min) {first:.2f} before these runs, '
            f'{last:.2f} after')


def make_report(args, env, results, floors, floor_figures, others,
                floor_trips=None):
    """The whole report, and the checks of every table; with
    ``floor_trips`` (counting round trips), a round-trip table after
    each backend and mode's."""
    environment.finish(env)
    lines = heading(env)
    loads = [env['load_average'][0], env['load_average_end'][0]] + [
        value for b in results.values() for cell in b.values()
        for value in cell['load_average']]
    lines += environment.load_warning(loads)
    if 'mysql' in args.backends:
        lines += patch_note()
    lines += [
        f'{args.objects} objects; write figures: median of {args.repeat} '
        f'runs on fresh databases; cold and warm read: best of '
        f'{args.repeat} fresh processes; hot read: best of '
        f'{args.repeat * args.hot_repeat}; prefetch and single loads: '
        f'best of {args.extra_repeat} fresh processes; '
        f'{args.latency_commits} small commits; {args.processes} processes '
        f'x {args.mp_objects // max(args.processes, 1)} objects; SQLite '
        f'synchronous: {args.sqlite_synchronous}; cache-local-mb: '
        + ('each side\'s default' if args.cache_local_mb is None
           else f'{args.cache_local_mb:g} on both sides') + '.',
        'ratio = how many times faster ours is than RS 4.3 (> 1.0: ours is '
        'faster); target = the ratio wanted (and for single loads on the '
        'server databases, at most 1.5 times the floor\'s time); x/floor '
        '= how many times the bare driver\'s time it takes.', '']
    if floor_trips is not None:
        lines += round_trip_intro(args)
    checks = []
    note = {'conflicts': f'{args.threads} threads x {args.conflict_commits}'}
    for backend in args.backends:
        floor = floors.get(backend, {})
        low = floor_figures.get(backend, {})
        for mode in args.modes:
            cell = results[backend][mode]
            label, keep = MODES[mode]
            title_text = (f'{TITLES[backend]}, {label} (keep-history '
                          f'{"true" if keep else "false"})')
            metrics = {impl: cell[impl].get('metrics', {}) for impl in IMPLS}
            table, found = backend_table(
                backend, f'{TITLES[backend]} {mode}', title_text, metrics,
                low, args, note)
            checks += found
            lines += table + [load_line(cell)] + conflict_notes(cell) + ['']
            if floor_trips is not None:
                lines += round_trip_table(
                    {impl: cell[impl].get('round_trips') for impl in IMPLS},
                    floor_trips.get(backend, {}), args) + ['']
        if 'phases' in floor:
            extra = ''
            text = floor['phases'].get('select_text')
            if text:
                extra += (f'; SELECT prepared (as plain text: '
                          f'{text["rate"]:,.0f} rows/s)')
            copy = floor['phases'].get('copy_all')
            if copy:
                extra += f'; one COPY of all rows: {copy["rate"]:,.0f} rows/s'
            lines += [f'floor on {TITLES[backend]}: {floor["driver"]}, rows '
                      f'of {floor["row_size"]} bytes{extra}.', '']
        elif floor:
            lines += [f'floor on {TITLES[backend]} FAILED: '
                      f'{floor["error"]}', '']
    if others:
        ours_by_run = {
            f'{b} {m}': results[b][m]['ours'].get('metrics', {})
            for b in args.backends for m in args.modes}
        lines += others_table(
            {o: others[o].get('metrics', {}) for o in args.others},
            ours_by_run, args)
        lines += [load_line(others)] + conflict_notes(others)
        for impl in args.others:
            runs = others[impl]['prefetch']
            if runs and not runs[-1]['phases']['prefetch']['storage_prefetch']:
                lines.append(f'{LABELS[impl]} has no storage.prefetch: its '
                             f'prefetch figure is the same reads without it.')
        lines.append('')
    lines += summary(checks)
    return '\n'.join(lines), checks
