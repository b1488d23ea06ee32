"""A pack's phases from its log (zodbpack's, with relstorage.pack at
INFO): how long each took, how much of it the throttle spent pausing,
and, given the results file of the run, what the server did meanwhile.

    .venv/bin/python benchmarks/packlog.py LOG [LOG ...] [--server JSON ...]

With several logs (say the first pack at one million objects and at ten)
it prints them side by side, and the ratio of the last to the first for
each figure.  The phases are those of docs/performance.rst's tables:

- references: the revisions read for their references;
- fill: from "analysing the database as of" to "objects have revisions up
  to" (pack_object filled);
- walk: the objects reached from the root;
- analysis end: from the walk's end to "analysis done";
- analysis pauses: the analysis's steps followed by a pause;
- pages: the pass by page (old revisions removed), its pauses, and its
  time without them;
- garbage: the garbage objects' removal, likewise;
- end: from the last deletion to "pack to ... done";
- sweep: from "done" to zodbpack's "packed storage".

``--server JSON``, once per log and in the same order: a results file of
``scale.py`` or ``pack.py`` whose server samples (one a second, taken
during the pack) span the log's pack.  Then each phase also gets the
server's counters over its time: the blocks read into PostgreSQL's
buffers and found there, the buffers its backends wrote out themselves,
the WAL's full-page images and the temporary files, each the difference
between the samples that bracket the phase.
"""
import json
import re
import sys
from datetime import datetime
from datetime import timezone

from pack import activity_summary

STAMP = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ')
SECONDS = r'([\d,]+) in ([\d.]+)s'

#: The counters of a server sample given per phase (benchmarks/harness's
#: ``activity``; PostgreSQL's names).
COUNTERS = ('blocks_read', 'blocks_hit', 'buffers_backend', 'wal_fpi',
            'temp_mb')

#: The phases whose spans are known from their first and last lines.
STARTS = {
    'references': 'revisions analysed for references (',
    'fill': 'analysing the database as of',
    'walk': 'objects reached from the root (',
    'pages': 'pages cleared of old revisions (',
    'garbage': 'garbage objects removed (',
}
#: A history-preserving pack that does not clear pages of old revisions
#: first (MariaDB's, SQLite's) removes them with the garbage in one phase,
#: under this name; it counts as the garbage phase.
COMBINED = 'garbage objects and old revisions removed'


def log_time(line):
    """The time of a log line (the machine's local time, naive), or None
    for a line without one."""
    found = STAMP.match(line)
    if found is None:
        return None
    return datetime.strptime(found.group(1), '%Y-%m-%d %H:%M:%S,%f')


def _number(text):
    return int(text.replace(',', ''))


def phases(lines):
    """``({figure: seconds or count}, {phase: (start, end)})`` of one
    pack's log lines (the first pack in the log: a second 'packing
    storage' line ends it)."""
    out = {}
    spans = {}
    marks = {}
    last = None         # the deletion phase whose pauses are logged next
    for line in lines:
        at = log_time(line)
        if at is None:
            continue
        line = line.replace(COMBINED, 'garbage objects removed')
        if 'packing storage' in line:
            if 'started' in marks:
                break
            marks['started'] = at
        for phase, start in STARTS.items():
            if start in line and phase not in spans:
                spans[phase] = (at, None)
        m = re.search(r'revisions analysed for references: ' + SECONDS,
                      line)
        if m and 'references' not in out:
            # (The catch-ups' lines after the analysis are not counted.)
            out['references'] = float(m.group(2))
            out['references rows'] = _number(m.group(1))
            spans['references'] = (spans['references'][0], at)
        elif 'objects have revisions up to' in line and 'fill' in spans:
            out['fill'] = (at - spans['fill'][0]).total_seconds()
            spans['fill'] = (spans['fill'][0], at)
        elif m := re.search(r'reached from the root: ' + SECONDS, line):
            out['walk'] = float(m.group(2))
            spans['walk'] = (spans['walk'][0], at)
        elif 'analysis done in' in line and 'walk' in spans:
            out['analysis end'] = (at - spans['walk'][1]).total_seconds()
        elif m := re.search(r'pages cleared of old revisions: ' + SECONDS,
                            line):
            out['pages'] = float(m.group(2))
            spans['pages'] = (spans['pages'][0], at)
            marks['deleted'], last = at, 'pages'
        elif m := re.search(r'garbage objects removed: ' + SECONDS, line):
            out['garbage'] = float(m.group(2))
            out['garbage objects'] = _number(m.group(1))
            spans['garbage'] = (spans['garbage'][0], at)
            marks['deleted'], last = at, 'garbage'
        elif m := re.search(r'followed by a pause .*?([\d.]+)s in all', line):
            # Each phase's pauses follow its last line; the analysis's
            # name it.
            if 'steps of the analysis' in line:
                out['analysis pauses'] = float(m.group(1))
            elif last is not None:
                out[f'{last} pauses'] = float(m.group(1))
            last = None
        elif re.search(r'pack to .* done', line):
            marks['done'] = at
            if 'deleted' in marks:
                out['end'] = (at - marks['deleted']).total_seconds()
                spans['end'] = (marks['deleted'], at)
        elif 'packed storage' in line and 'done' in marks:
            out['sweep'] = (at - marks['done']).total_seconds()
    for phase in ('pages', 'garbage'):
        if phase in out:
            out[f'{phase} unpaused'] = out[phase] - out.get(
                f'{phase} pauses', 0.0)
    if 'started' in marks:
        spans['pack'] = (marks['started'], marks.get('done'))
    return out, {k: v for k, v in spans.items() if v[1] is not None}


def _seconds_of_day(text):
    hours, minutes, seconds = text.split(':')
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _day_seconds(at):
    """Seconds into the UTC day of a log's time (the machine's local
    time), as the samples give theirs (pack.utc)."""
    at = at.astimezone(timezone.utc)
    return (at.hour * 3600 + at.minute * 60 + at.second
            + at.microsecond / 1e6)


def _sample_lists(node):
    """Every ``samples`` list of a results file, wherever it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == 'samples' and isinstance(value, list):
                yield value
            else:
                yield from _sample_lists(value)
    elif isinstance(node, list):
        for value in node:
            yield from _sample_lists(value)


def server_figures(path, spans):
    """``{figure: value}``: the counters over each phase's span, from
    the samples of ``path`` that span the pack (the logs and the samples
    written on one machine, their times of day compared in UTC)."""
    with open(path, encoding='utf-8') as f:
        results = json.load(f)
    start, end = (_day_seconds(t) for t in spans['pack'])
    for samples in _sample_lists(results):
        times = [_seconds_of_day(at) for at, _ in samples]
        if times and times[0] <= start + 2 and times[-1] >= end - 2:
            break
    else:
        raise SystemExit(f'{path}: no server samples span the pack '
                         f'logged from {spans["pack"][0]}')
    out = {}
    for phase, (first, last) in spans.items():
        if phase == 'pack':
            continue
        a, b = _day_seconds(first), _day_seconds(last)
        # The last sample at or before the start, the first at or after
        # the end.
        i = max([k for k, t in enumerate(times) if t <= a] or [0])
        j = min([k for k, t in enumerate(times) if t >= b]
                or [len(times) - 1])
        summary = activity_summary(samples[i:j + 1])
        for counter in COUNTERS:
            if counter in summary:
                out[f'{phase}: {counter}'] = summary[counter]
    return out


ORDER = ('references', 'references rows', 'fill', 'walk', 'analysis end',
         'analysis pauses', 'pages', 'pages pauses', 'pages unpaused',
         'garbage objects', 'garbage', 'garbage pauses', 'garbage unpaused',
         'end', 'sweep')


def _cell(value):
    if value is None:
        return '-'
    if isinstance(value, int):
        return f'{value:,}'
    return f'{value:,.1f}'


def main(argv):
    if not argv or argv[0] in ('-h', '--help'):
        print(__doc__.strip())
        return 0 if argv else 2
    logs, servers = [], []
    args = iter(argv)
    for arg in args:
        if arg == '--server':
            servers.append(next(args, None))
        else:
            logs.append(arg)
    if None in servers or (servers and len(servers) != len(logs)):
        print('packlog.py: give --server JSON once for each log',
              file=sys.stderr)
        return 2
    tables = []
    for i, path in enumerate(logs):
        with open(path, encoding='utf-8') as f:
            figures, spans = phases(f)
        if servers:
            figures.update(server_figures(servers[i], spans))
        tables.append(figures)
    keys = [k for k in ORDER if any(k in t for t in tables)]
    for phase in (*STARTS, 'end'):
        keys += [f'{phase}: {c}' for c in COUNTERS
                 if any(f'{phase}: {c}' in t for t in tables)]
    width = max(len(k) for k in keys) + 2
    several = len(logs) > 1
    print(f'{"figure":<{width}}'
          + ''.join(f'{i + 1:>14}' for i in range(len(logs)))
          + ('       ratio' if several else ''))
    for key in keys:
        values = [t.get(key) for t in tables]
        ratio = ''
        if several and values[0] and values[-1] is not None:
            ratio = f'{values[-1] / values[0]:>12.1f}'
        print(f'{key:<{width}}' + ''.join(f'{_cell(v):>14}' for v in values)
              + ratio)
    for i, path in enumerate(logs):
        print(f'{i + 1}: {path}'
              + (f' (server: {servers[i]})' if servers else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
