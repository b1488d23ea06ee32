"""A pack's phases from its log (zodbpack's, with relstorage.pack at
INFO): how long each took and how much of it the throttle spent pausing.

    .venv/bin/python benchmarks/packlog.py LOG [LOG ...]

With several logs (say the first pack at one million objects and at ten)
it prints them side by side, and the ratio of the last to the first for
each phase.  The phases are those docs/performance.rst's tables give:

- references: the revisions read for their references;
- fill: from "analysing the database as of" to "objects have revisions up
  to" (pack_object filled);
- walk: the objects reached from the root;
- analysis end: from the walk's end to "analysis done";
- analysis pauses: the analysis's steps followed by a pause;
- pages: the pass by page (old revisions removed), its pauses, and
  its time without them;
- garbage: the garbage objects' removal, likewise;
- end: from the last deletion to "pack to ... done";
- sweep: from "done" to zodbpack's "packed storage".
"""
import re
import sys
from datetime import datetime

STAMP = re.compile(r'^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ')
SECONDS = r'([\d,]+) in ([\d.]+)s'


def _at(line):
    found = STAMP.match(line)
    if found is None:
        return None
    return datetime.strptime(found.group(1), '%Y-%m-%d %H:%M:%S,%f')


def _number(text):
    return int(text.replace(',', ''))


def phases(lines):
    """``{phase: seconds or count}`` of one pack's log lines (the first
    pack in the log: a second 'packing storage' line ends it)."""
    out = {}
    marks = {}
    last = None         # the deletion phase whose pauses are logged next
    for line in lines:
        at = _at(line)
        if at is None:
            continue
        if 'packing storage' in line:
            if marks.get('started'):
                break
            marks['started'] = at
        m = re.search(r'revisions analysed for references: ' + SECONDS,
                      line)
        if m and 'references' not in out:
            # (The catch-ups' lines after the analysis are not counted.)
            out['references'] = float(m.group(2))
            out['references rows'] = _number(m.group(1))
        elif 'analysing the database as of' in line:
            marks['fill from'] = at
        elif 'objects have revisions up to' in line and 'fill from' in marks:
            out['fill'] = (at - marks['fill from']).total_seconds()
        elif m := re.search(r'reached from the root: ' + SECONDS, line):
            out['walk'] = float(m.group(2))
            marks['walk end'] = at
        elif 'analysis done in' in line and 'walk end' in marks:
            out['analysis end'] = (at - marks['walk end']).total_seconds()
        elif m := re.search(r'pages cleared of old revisions: ' + SECONDS,
                            line):
            out['pages'] = float(m.group(2))
            marks['deleted'], last = at, 'pages'
        elif m := re.search(r'garbage objects removed: ' + SECONDS, line):
            out['garbage'] = float(m.group(2))
            out['garbage objects'] = _number(m.group(1))
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
        elif 'packed storage' in line and 'done' in marks:
            out['sweep'] = (at - marks['done']).total_seconds()
    for phase in ('pages', 'garbage'):
        if phase in out:
            out[f'{phase} unpaused'] = out[phase] - out.get(
                f'{phase} pauses', 0.0)
    return out


ORDER = ('references', 'references rows', 'fill', 'walk', 'analysis end',
         'analysis pauses', 'pages', 'pages pauses', 'pages unpaused',
         'garbage objects', 'garbage', 'garbage pauses', 'garbage unpaused',
         'end', 'sweep')


def main(argv):
    if not argv or argv[0] in ('-h', '--help'):
        print(__doc__.strip())
        return 0 if argv else 2
    tables = []
    for path in argv:
        with open(path, encoding='utf-8') as f:
            tables.append(phases(f))
    width = max(len(p) for p in argv) if len(argv) > 1 else 12
    width = max(width, 12)
    print(f'{"phase":<18}' + ''.join(f'{i + 1:>{14}}'
                                     for i in range(len(argv)))
          + ('       ratio' if len(argv) > 1 else ''))
    for key in ORDER:
        values = [t.get(key) for t in tables]
        if all(v is None for v in values):
            continue
        cells = ''.join(
            f'{"-" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:,.1f}":>14}'
            for v in values)
        ratio = ''
        if len(values) > 1 and values[0] and values[-1] is not None:
            ratio = f'{values[-1] / values[0]:>12.1f}'
        print(f'{key:<18}{cells}{ratio}')
    for i, path in enumerate(argv):
        print(f'{i + 1}: {path}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
