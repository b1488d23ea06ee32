"""relstorage-mirror: fill the JSON mirror (json-state) of the relstorage
databases of a ZConfig file in, or check it.

    relstorage-mirror [--check] [--batch N] [--json] [-q] CONFIG

For each ``<relstorage>`` section, renders the current revisions whose
``object_json`` row is missing or of an older revision (a database from
before json-state, commits of clients without it) and removes the rows
of objects that no longer exist, in batches, while other clients go on
writing (docs/json.rst, "Keeping it complete").  Ctrl-C stops at a batch
boundary; run it again to go on.  ``--check`` writes nothing and says
what is missing.  Other storage sections are passed over.

Exit status: 0 done (``--check``: nothing missing); 1 a database could
not be filled, or ``--check`` found rows missing, behind or left over; 2
bad input; 130 stopped by Ctrl-C.
"""
import argparse
import json
import sys

from ZODB.POSException import StorageError

from relstorage.cli import BAD_INPUT
from relstorage.cli import FAILED
from relstorage.cli import OK
from relstorage.cli import STOPPED
from relstorage.cli import TerminalProgress
from relstorage.cli import command_parser
from relstorage.cli import find_relstorage
from relstorage.cli import load_or_report
from relstorage.cli import setup_logging
from relstorage.cli import stop_on_ctrl_c
from relstorage.cli import storage_name
from relstorage.mirror import fill as mirror_fill

PROGRAM = 'relstorage-mirror'


def batch_size(text):
    """argparse type of --batch."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 100000:
        raise argparse.ArgumentTypeError(
            f'{text!r} is not a number of objects from 1 to 100000')
    return value


def parser():
    p = command_parser(
        PROGRAM,
        'Fill the JSON mirror (json-state) of the relstorage databases of a '
        'ZConfig file in, or check it.',
        '%%import relstorage and one or more storage sections')
    p.add_argument('--check', action='store_true',
                   help='write nothing: count the objects whose JSON is '
                        'missing or behind and the rows left over (exit '
                        'status 1 if there are any)')
    p.add_argument('--batch', type=batch_size, default=mirror_fill.BATCH,
                   help='objects per batch (default %(default)s)')
    p.add_argument('--json', action='store_true',
                   help='print one JSON document (a list, a dict per '
                        'storage) instead of text')
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    log = setup_logging(PROGRAM, args.quiet)
    configs = load_or_report(PROGRAM, args.config)
    if configs is None:
        return BAD_INPUT
    progress = TerminalProgress(name='mirror')
    status, found = OK, []
    with stop_on_ctrl_c(progress, PROGRAM, 'batch boundary'):
        for config in configs:
            result, figures = _one(config, args, log, progress)
            status = max(status, result)
            if figures is not None:
                found.append(dict(storage=storage_name(config), **figures))
            if result == STOPPED:
                break
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        for figures in found:
            print(_text(figures))
    return status


def _one(config, args, log, progress):
    name = storage_name(config)
    try:
        storage = config.open()
    except (StorageError, OSError, ValueError) as e:
        log.error('cannot open %s: %s', name, e)
        return FAILED, None
    try:
        ours = find_relstorage(storage)
        if ours is None:
            log.warning('%s is not a relstorage: passed over', name)
            return OK, None
        adapter = ours._adapter
        if not adapter.capabilities.json_mirror:
            log.error('%s: this database has no JSON mirror', name)
            return FAILED, None
        if args.check:
            figures = mirror_fill.check(adapter)
            missing = figures['behind'] + figures['orphans']
            if missing:
                log.error('%s: %d objects without the JSON of their '
                          'current revision, %d rows of objects that no '
                          'longer exist', name, figures['behind'],
                          figures['orphans'])
            return (FAILED if missing else OK), figures
        log.info('filling the JSON mirror of %s in', name)
        figures = mirror_fill.fill(adapter, args.batch, progress)
        if figures['stopped']:
            log.warning('%s: stopped at a batch boundary after %d objects; '
                        'run %s again to go on', name, figures['rendered'],
                        PROGRAM)
            return STOPPED, figures
        log.info('%s: %d objects rendered (%d without JSON: they could not '
                 'be rendered), %d rows of objects that no longer exist '
                 'removed, in %.1fs', name, figures['rendered'],
                 figures['unrendered'], figures['orphans'],
                 figures['seconds'])
        return OK, figures
    except StorageError as e:
        log.error('%s: filling the JSON mirror failed: %s', name, e)
        return FAILED, None
    finally:
        storage.close()


def _text(figures):
    lines = [figures['storage']]
    for key, value in figures.items():
        if key == 'storage':
            continue
        if isinstance(value, float):
            value = f'{value:.1f}'
        elif isinstance(value, int) and not isinstance(value, bool):
            value = f'{value:,}'
        lines.append(f'  {key:<12}{value}')
    return '\n'.join(lines)


if __name__ == '__main__':
    sys.exit(main())
