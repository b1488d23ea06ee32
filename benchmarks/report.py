"""The tables run.py prints: the figures, their ratios, and whether each
meets the project's target.

Everything here is computed from the measurements passed in; nothing is
decided in advance.  compare.py uses the same names and formatting.
"""

LABELS = {'ours': 'ours', 'ref': 'RS 4.3', 'floor': 'floor',
          'filestorage': 'FileStorage', 'zeo': 'ZEO'}

#: (key, label, kind): kind 'rate' is objects per second and 'commits'
#: commits per second (higher is better), 'latency' is milliseconds (lower
#: is better).  ``{n}`` in a label is the number of processes.
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
    ('mixed', 'requests (5 reads, 1 write), {n} processes', 'commits'),
)
UNITS = {'rate': 'obj/s', 'commits': 'commit/s', 'latency': 'ms'}

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


def label_of(label, processes):
    return label.format(n=processes)


def render(header, rows, right_from=2):
    widths = [max(len(str(row[i])) for row in rows + [header])
              for i in range(len(header))]

    def line(row):
        cells = [str(c).ljust(w) for c, w in
                 zip(row[:right_from], widths[:right_from])]
        cells += [str(c).rjust(w) for c, w in
                  zip(row[right_from:], widths[right_from:])]
        return '  '.join(cells).rstrip()
    rule = '  '.join('=' * w for w in widths)
    return [rule, line(header), rule] + [line(r) for r in rows] + [rule]


def title(text):
    return [text, '-' * len(text), '']


def target_lines(checks, value_text, target_text):
    """The "Targets" section: how many of ``checks`` were met, then a line
    each (``ok``, ``MISS``, or ``n/a`` where ``ok`` is None: not
    measured), with ``value_text(check)`` and ``target_text(check)``.  A
    missed check with a true ``tie`` is marked ``tie`` (its ``spread``
    said) and counted apart, still as missed."""
    measured = [c for c in checks if c['ok'] is not None]
    met = [c for c in measured if c['ok']]
    ties = [c for c in measured if not c['ok'] and c.get('tie')]
    lines = title('Targets')
    lines.append(f'{len(met)} of {len(measured)} targets met'
                 + (f' ({len(checks) - len(measured)} not measured: a side '
                    f'failed).' if len(measured) < len(checks) else '.')
                 + (f' {len(ties)} of the missed are ties: short of the '
                    f'target by less than the spread of the runs of one '
                    f'side.' if ties else ''))
    for c in checks:
        mark = {True: 'ok  ', False: 'MISS', None: 'n/a '}[c['ok']]
        extra = ''
        if c['ok'] is False and c.get('tie'):
            mark, extra = 'tie ', f' (runs spread +/-{c["spread"]:.2f})'
        lines.append(f'{mark}  {c["where"]}: {c["label"]}: '
                     f'{value_text(c)}, target {target_text(c)}{extra}')
    return lines


def backend_table(backend, where, title_text, metrics, floor, processes,
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
        label = label_of(label, processes)
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


def others_table(others, ours_by_run, processes):
    """FileStorage and ZEO, measured once per run, and how many times
    faster ours is than each, per backend and mode of the run."""
    fs, zeo = others.get('filestorage', {}), others.get('zeo', {})
    header = ['phase', 'unit', 'FileStorage', 'ZEO']
    header += [name for name in ours_by_run]
    rows = []
    for key, label, kind in METRICS:
        if key not in fs and key not in zeo:
            continue
        row = [label_of(label, processes), UNITS[kind], fmt(fs.get(key), kind),
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
    """Which targets are met, computed from the checks of every table."""
    total = len(checks)
    missed = [c for c in checks if not c['ok']]
    lines = title('Targets')
    if not total:
        return lines + ['no comparison was measured']
    lines.append(f'{total - len(missed)} of {total} targets met.')
    for c in missed:
        value = '-' if c['value'] is None else f'{c["value"]:.2f}'
        if c['against'] == 'floor':
            need = f'ours/floor {value}x, target <= {c["target"]:.1f}x'
        else:
            need = f'ratio {value}, target >= {c["target"]:.1f}'
        lines.append(f'MISS  {c["where"]}: {c["label"]}: {need}')
    return lines


def describe_environment(env):
    lines = [
        f"date            {env['date']}",
        f"machine         {env['cpus']} CPUs ({env['cpu']}), "
        f"{env['platform']}",
    ]
    for key, name in (('postgresql_server', 'PostgreSQL'),
                      ('mysql_server', 'MariaDB'),
                      ('sqlite_library', 'SQLite')):
        if key in env:
            lines.append(f'{name:<15} {env[key]}')
    for impl in ('ours', 'ref'):
        info = env.get(impl)
        if not info:
            continue
        name = 'ours' if impl == 'ours' else 'RelStorage 4.3'
        psycopg2 = info.get('psycopg2-binary') or info.get('psycopg2')
        lines.append(f"{name:<15} relstorage {info['relstorage']} from "
                     f"{info['relstorage_file']}")
        lines.append(
            f"{'':<15} Python {info['python']}, ZODB {info.get('ZODB')}, "
            f"persistent {info.get('persistent')}, BTrees "
            f"{info.get('BTrees')}, psycopg2 {psycopg2}, mysqlclient "
            f"{info.get('mysqlclient')}, SQLite {info.get('sqlite')}")
    if env.get('ours', {}).get('ZEO'):
        lines.append(f"{'ZEO':<15} ZEO {env['ours']['ZEO']} (server and "
                     f"client in the project's venv), FileStorage from ZODB "
                     f"{env['ours'].get('ZODB')}")
    lines.append(f"ours at         git {env['git']}")
    lines.append(f"load average    {env['load_average']} at the start")
    return '\n'.join(lines)
