"""What a benchmark prints and writes: the log (with the time elapsed since
the run started), the report (its heading, tables, target verdicts and
notes) and the results document (JSON).

The log goes to stderr; the report to stdout, table by table as the run
goes on, and whole into the results document under ``report``.
"""
import json
import sys
import time
from pathlib import Path

from .environment import describe

_started = time.monotonic()


def log(message):
    print(f'[{time.monotonic() - _started:7.1f}s] {message}',
          file=sys.stderr, flush=True)


def title(text):
    return [text, '-' * len(text), '']


def heading(env, text='Environment'):
    """The report's first lines: ``text`` underlined, the environment."""
    return ['', text, '=' * len(text), ''] + describe(env) + ['']


def render(header, rows, right_from=2):
    """A table in reStructuredText's simple form: the first ``right_from``
    columns left-aligned, the others right-aligned."""
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


def verdict(ok):
    """A check's word in a table: ``ok``, ``MISS``, or ``n/a`` (None: not
    measured)."""
    return {True: 'ok', False: 'MISS', None: 'n/a'}[ok]


def target_lines(checks, value_text, target_text, missed_only=False):
    """The "Targets" section: how many of ``checks`` were met, then a line
    each (``ok``, ``MISS``, or ``n/a`` where ``ok`` is None: not
    measured; with ``missed_only``, the misses only), with
    ``value_text(check)`` and ``target_text(check)``.  A missed check with
    a true ``tie`` is marked ``tie`` (its ``spread`` said) and counted
    apart, still as missed."""
    lines = title('Targets')
    if not checks:
        return lines + ['no comparison was measured']
    measured = [c for c in checks if c['ok'] is not None]
    met = [c for c in measured if c['ok']]
    ties = [c for c in measured if not c['ok'] and c.get('tie')]
    lines.append(f'{len(met)} of {len(measured)} targets met'
                 + (f' ({len(checks) - len(measured)} not measured: a side '
                    f'failed).' if len(measured) < len(checks) else '.')
                 + (f' {len(ties)} of the missed are ties: short of the '
                    f'target by less than the spread of the runs of one '
                    f'side.' if ties else ''))
    for c in checks:
        if missed_only and c['ok'] is not False:
            continue
        mark = {True: 'ok  ', False: 'MISS', None: 'n/a '}[c['ok']]
        extra = ''
        if c['ok'] is False and c.get('tie'):
            mark, extra = 'tie ', f' (runs spread +/-{c["spread"]:.2f})'
        lines.append(f'{mark}  {c["where"]}: {c["label"]}: '
                     f'{value_text(c)}, target {target_text(c)}{extra}')
    return lines


def patch_note(more=''):
    """The note on RelStorage 4.3's run-time patch for MariaDB."""
    import mariadb_patch
    return [f'NOTE: {mariadb_patch.DESCRIPTION}{more}', '']


def reference_patch(**more):
    """The results document's record of that patch."""
    import mariadb_patch
    return {'backend': 'mysql', 'description': mariadb_patch.DESCRIPTION,
            **more}


def show(lines, into=None):
    """Print report lines now (and add them to the list ``into``)."""
    print('\n'.join(lines), flush=True)
    if into is not None:
        into += lines


def run_time(started):
    return ['', f'total run time {(time.monotonic() - started) / 60:.1f} '
                f'min']


def write_results(path, document):
    """Write the results document (JSON) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=str) + '\n')
    log(f'results written to {path}')
