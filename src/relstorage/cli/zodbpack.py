"""zodbpack: pack every storage of a ZConfig file.

    zodbpack [-d DAYS] [--prepack | --use-prepack-state | --check-refs-only]
             [--vacuum] [-q] CONFIG

CONFIG holds ``%import relstorage`` and one or more storage sections
(``<relstorage>``, ``<filestorage>``, ...).  Each storage is packed in turn
to DAYS days ago (default 1; a negative number packs to the last
transaction).  The pre-pack options and --check-refs-only apply to
relstorage only; other storages are packed as ZODB packs them.

Exit status: 0 done; 1 a storage could not be packed (the message says
why), or --check-refs-only found broken references; 2 bad input (the
file, a section, an argument); 130 stopped by Ctrl-C at a batch boundary
(run it again to go on).
"""
import argparse
import math
import sys
import time

from ZODB.POSException import StorageError
from ZODB.serialize import referencesf

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
from relstorage.errors import PackStopped
from relstorage.pack import check_refs

PROGRAM = 'zodbpack'


def days(text):
    """argparse type of --days: any finite number."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f'{text!r} is not a number of days')
    return value


def parser():
    p = command_parser(
        PROGRAM,
        'Pack the storages of a ZConfig file: remove old revisions and '
        'unreachable objects.',
        'one or more storage sections')
    p.add_argument(
        '-d', '--days', type=days, default=1.0,
        help='days of history to keep (default 1); a negative number packs '
             'to the last committed transaction')
    phase = p.add_mutually_exclusive_group()
    phase.add_argument(
        '--prepack', action='store_true',
        help='run only the analysis (pre-pack) and keep it; relstorage '
             'only, as pack-prepack-only')
    phase.add_argument(
        '--use-prepack-state', action='store_true',
        help='skip the analysis: delete what the kept one found, going on '
             'where a stopped pack left off; relstorage only, as '
             'pack-skip-prepack')
    phase.add_argument(
        '--check-refs-only', action='store_true',
        help='pack nothing: analyse as of the last transaction and list '
             'references of reachable objects to objects that no longer '
             'exist (exit status 1 if there are any); relstorage only')
    p.add_argument(
        '--vacuum', action='store_true',
        help='after packing, give the space of removed rows back '
             '(PostgreSQL VACUUM ANALYZE, MySQL OPTIMIZE TABLE, SQLite '
             'VACUUM; see docs/operations.rst for what each locks)')
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    log = setup_logging(PROGRAM, args.quiet)
    configs = load_or_report(PROGRAM, args.config)
    if configs is None:
        return BAD_INPUT
    progress = TerminalProgress()
    status = OK
    with stop_on_ctrl_c(progress, PROGRAM, 'batch boundary'):
        for config in configs:
            result = _one(config, args, log, progress)
            status = max(status, result)
            if result == STOPPED:
                break
    return status


def _one(config, args, log, progress):
    name = storage_name(config)
    log.info('opening %s', name)
    try:
        storage = config.open()
    except (StorageError, OSError, ValueError) as e:
        log.error('cannot open %s: %s', name, e)
        return FAILED
    try:
        ours = find_relstorage(storage)
        special = args.prepack or args.use_prepack_state or \
            args.check_refs_only
        if special and ours is None:
            log.warning('%s is not a relstorage: --prepack, '
                        '--use-prepack-state and --check-refs-only do not '
                        'apply; skipped', name)
            return OK
        if args.check_refs_only:
            return _check(ours, name, log, progress)
        t = time.time() if args.days < 0 else time.time() - args.days * 86400
        log.info('packing %s to %s', name, 'the last transaction'
                 if args.days < 0 else
                 time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t)))
        started = time.monotonic()
        if ours is not None:
            ours.pack(t, referencesf, prepack_only=args.prepack,
                      skip_prepack=args.use_prepack_state, progress=progress)
        else:
            storage.pack(t, referencesf)
        log.info('packed %s in %.1fs', name, time.monotonic() - started)
        if args.vacuum and ours is not None and not args.prepack:
            started = time.monotonic()
            packer = ours._adapter.packer
            what = packer.reclaim_space(ours._adapter.connmanager)
            log.info('%s: %s done in %.1fs', name, what,
                     time.monotonic() - started)
        return OK
    except PackStopped as e:
        log.warning('%s: %s', name, e)
        return STOPPED
    except StorageError as e:
        log.error('packing %s failed: %s', name, e)
        return FAILED
    finally:
        storage.close()


def _check(storage, name, log, progress):
    broken, unreadable = check_refs(storage, referencesf, progress)
    for zoid, tid, reason in unreadable:
        print(f'oid 0x{zoid:016x} at tid 0x{tid:016x}: references cannot '
              f'be read ({reason})')
    for zoid, to_zoid in broken:
        print(f'oid 0x{zoid:016x} refers to missing oid 0x{to_zoid:016x}')
    if unreadable:
        log.error('%s: %d revisions whose references cannot be read (a pack '
                  'removes no garbage while they are stored; references '
                  'not checked)', name, len(unreadable))
    if broken:
        log.error('%s: %d broken references (up to 1000 listed)', name,
                  len(broken))
    if broken or unreadable:
        return FAILED
    log.info('%s: no reachable object refers to a missing one', name)
    return OK


if __name__ == '__main__':
    sys.exit(main())
