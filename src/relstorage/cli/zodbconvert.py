"""zodbconvert: copy a ZODB storage into another, and check the copy.

    zodbconvert [--dry-run] [--clear | --incremental] [--verify] [-q] CONFIG

CONFIG holds ``%import relstorage`` (when either side is a relstorage) and
two storage sections named ``source`` and ``destination``, of any type::

    <filestorage source>
      path /var/zope/Data.fs
      blob-dir /var/zope/blobs
    </filestorage>
    <relstorage destination>
      blob-dir /var/zope/blobcache
      shared-blob-dir false
      <postgresql>
        dsn dbname=zodb
      </postgresql>
    </relstorage>

Every transaction of the source is copied with its id and metadata, its
undo records, deletions and blobs (a history-free destination gets the
records still current in the source).  The destination must be empty
unless --clear (empty a relstorage first) or --incremental (continue after
the destination's last transaction, which the source must hold and agree
on) is given.  --verify compares the copy with the source afterwards; given
alone on a destination that holds data, it only compares.

Exit status: 0 done (and no difference found); 1 the copy was refused or
failed (the message says why, naming the transaction), or --verify found
differences (each printed on standard output); 2 bad input (the file, a
section, a storage that cannot be opened, an argument); 130 stopped by
Ctrl-C at a transaction boundary (--incremental goes on).
"""
import sys
import time

from ZODB.POSException import StorageError

from relstorage.cli import BAD_INPUT
from relstorage.cli import BadInput
from relstorage.cli import FAILED
from relstorage.cli import OK
from relstorage.cli import STOPPED
from relstorage.cli import TerminalProgress
from relstorage.cli import command_parser
from relstorage.cli import find_relstorage
from relstorage.cli import load_named_storages
from relstorage.cli import setup_logging
from relstorage.cli import stop_on_ctrl_c
from relstorage.cli import storage_name
from relstorage.copy.compare import describe_tid
from relstorage.copy.convert import Plan
from relstorage.copy.convert import copy
from relstorage.copy.convert import has_data
from relstorage.copy.convert import keeps_history
from relstorage.copy.verify import verify
from relstorage.errors import ConvertError
from relstorage.errors import ConvertStopped

PROGRAM = 'zodbconvert'


def parser():
    p = command_parser(
        PROGRAM,
        'Copy the storage of the <... source> section of a ZConfig file '
        'into its <... destination> section.',
        '<... source> and <... destination> storage sections', debug=True)
    p.add_argument(
        '--dry-run', action='store_true',
        help='open both storages (the destination read-only) and say what '
             'would be done; write nothing')
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        '--clear', action='store_true',
        help='empty the destination (a relstorage) first: every object, '
             'transaction and blob file in it is removed')
    start.add_argument(
        '--incremental', action='store_true',
        help="copy the source's transactions after the destination's last "
             "one (refused when the source lacks it or the two disagree "
             "on it)")
    p.add_argument(
        '--verify', action='store_true',
        help='compare the destination with the source after copying (or '
             'only compare, when given alone on a destination that holds '
             'data): every transaction and record, or every current record '
             'of a history-free destination, and blobs; differences are '
             'printed, exit status 1')
    return p


def _open(config, read_only=False):
    """Open a storage section; BadInput with one line if it cannot be."""
    name = storage_name(config)
    if read_only:
        section = getattr(config, 'config', None)
        if section is not None and hasattr(section, 'read_only'):
            section.read_only = True
    try:
        return config.open()
    except Exception as e:
        text = ' '.join(str(e).split()) or type(e).__name__
        raise BadInput(f'cannot open {name}: {text}') from None


def main(argv=None):
    args = parser().parse_args(argv)
    log = setup_logging(PROGRAM, args.quiet)
    if args.debug:
        log.root.setLevel('DEBUG')
    try:
        source_config, dest_config = load_named_storages(
            args.config, ('source', 'destination'))
        # The source is only read: opened read-only, it cannot be changed
        # by mistake (a FileStorage then writes no index either).
        source = _open(source_config, read_only=True)
    except BadInput as e:
        print(f'{PROGRAM}: error: {e}', file=sys.stderr)
        return BAD_INPUT
    try:
        try:
            destination = _open(dest_config, read_only=args.dry_run)
        except BadInput as e:
            if not args.dry_run:
                raise
            print(f'{PROGRAM}: {e}', file=sys.stderr)
            print('dry run: the destination cannot be opened read-only '
                  '(a new database or file is created only by a real '
                  'run); nothing was written', file=sys.stderr)
            return OK
        try:
            return _run(args, log, source, destination,
                        storage_name(source_config),
                        storage_name(dest_config))
        finally:
            destination.close()
    except BadInput as e:
        print(f'{PROGRAM}: error: {e}', file=sys.stderr)
        return BAD_INPUT
    finally:
        source.close()


def _run(args, log, source, destination, source_name, dest_name):
    ours = find_relstorage(destination)
    if args.clear and ours is None:
        raise BadInput(f'--clear empties only a relstorage destination; '
                       f'{dest_name} is not one')
    if args.dry_run:
        return _dry_run(args, source, destination, source_name, dest_name)
    verify_only = args.verify and not args.clear and not args.incremental \
        and has_data(destination)
    progress = TerminalProgress(name='convert')
    with stop_on_ctrl_c(progress, PROGRAM, 'transaction boundary'):
        return _copy_and_verify(args, log, source, destination, ours,
                                verify_only, progress, source_name,
                                dest_name)


def _copy_and_verify(args, log, source, destination, ours, verify_only,
                     progress, source_name, dest_name):
    try:
        if not verify_only:
            if args.clear:
                log.info('emptying %s', dest_name)
                ours.zap_all()
            started = time.monotonic()
            log.info('copying %s into %s', source_name, dest_name)
            done = copy(source, destination, incremental=args.incremental,
                        progress=progress)
            elapsed = time.monotonic() - started
            if done.transactions:
                log.info('copied %d transactions (%d records, %d blobs, '
                         '%.1f MB) in %.1fs, up to %s', done.transactions,
                         done.records, done.blobs, done.bytes / 1e6,
                         elapsed, describe_tid(done.last))
            else:
                log.info('nothing to copy: the destination is up to date')
        if args.verify:
            return _verify(source, destination, log, progress)
        return OK
    except ConvertStopped as e:
        log.warning('%s; run again with --incremental to go on', e)
        return STOPPED
    except (ConvertError, StorageError) as e:
        log.error('%s', e)
        return FAILED


def _verify(source, destination, log, progress):
    def report(message):
        print(message, flush=True)

    started = time.monotonic()
    outcome = verify(source, destination, report, progress)
    what = ('every transaction and record' if keeps_history(destination)
            else 'every current record')
    log.info('verified %s: %d transactions, %d records, %d blobs in %.1fs',
             what, outcome.transactions, outcome.records, outcome.blobs,
             time.monotonic() - started)
    if outcome.differences:
        log.error('%d differences between the source and the destination',
                  outcome.differences)
        return FAILED
    log.info('the destination matches the source')
    return OK


def _dry_run(args, source, destination, source_name, dest_name):
    def say(text):
        print(f'dry run: {text}')

    say(f'source {source_name}, destination {dest_name} '
        f'({"keeps history" if keeps_history(destination) else "history-free: current records only"})')
    if args.clear:
        say(f'would empty {dest_name} first')
        incremental = False
    else:
        incremental = args.incremental
    try:
        if args.clear:
            plan = Plan(source, _Empty(destination), False)
        else:
            plan = Plan(source, destination, incremental)
    except ConvertError as e:
        say(f'would refuse: {e}')
        return FAILED
    if plan.last is not None:
        say(f'the destination holds transactions up to '
            f'{describe_tid(plan.last)}; the source agrees on it')
    count, first, last = plan.transactions()
    if count:
        say(f'would copy {count:,} transactions, {describe_tid(first)} to '
            f'{describe_tid(last)}')
    else:
        say('nothing to copy: the destination is up to date')
    if args.verify:
        say('would then verify the destination against the source')
    say('nothing was written')
    return OK


class _Empty:
    """The destination as --clear would leave it (for a dry run)."""

    def __init__(self, storage):
        self._storage = storage

    def lastTransaction(self):
        from ZODB.utils import z64
        return z64

    def __getattr__(self, name):
        return getattr(self._storage, name)


if __name__ == '__main__':
    sys.exit(main())
