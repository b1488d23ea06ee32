"""relstorage-migrate: show and apply the schema migrations of the
relstorage sections of a ZConfig file.

    relstorage-migrate [--sql | --apply] [-q] CONFIG

Without an option it tells, for each ``<relstorage>`` section, the schema
version its database holds, the version this relstorage needs and the
migration steps between them (``migrations/NNNN-what/<database>.sql``).
``--sql`` prints those steps' SQL, for a DBA to review or run by hand;
``--apply`` runs them, under the lock that serialises schema changes, in
one transaction where the database allows it (PostgreSQL, SQLite; MySQL
commits each DDL statement, and its steps are written to be run again
after an interruption).  Stop every other client of the database first.
Sections that are not relstorage are passed over.

The storages are not opened as storages (that refuses an old schema):
only their adapters, with the section's options.

Exit status: 0 done (or nothing to do); 1 a database could not be read or
upgraded, or holds a newer or unknown schema, and without ``--apply`` a
database needs migrating; 2 bad input (the file, a section, an argument).
"""
import sys

from ZODB.POSException import StorageError

from relstorage import migrations
from relstorage.adapters.schema import SCHEMA_VERSION
from relstorage.cli import BAD_INPUT
from relstorage.cli import FAILED
from relstorage.cli import OK
from relstorage.cli import command_parser
from relstorage.cli import load_or_report
from relstorage.cli import relstorage_adapter
from relstorage.cli import setup_logging
from relstorage.cli import storage_name
from relstorage.migrations import mode_name

PROGRAM = 'relstorage-migrate'


def parser():
    p = command_parser(
        PROGRAM,
        'Show, print or apply the schema migration steps that the '
        'relstorage databases of a ZConfig file need.',
        '%%import relstorage and one or more storage sections')
    action = p.add_mutually_exclusive_group()
    action.add_argument(
        '--sql', action='store_true',
        help='print the SQL of the steps each database needs (nothing is '
             'changed)')
    action.add_argument(
        '--apply', action='store_true',
        help='apply the steps (stop every other client of the database '
             'first)')
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    log = setup_logging(PROGRAM, args.quiet)
    configs = load_or_report(PROGRAM, args.config)
    if configs is None:
        return BAD_INPUT
    status = OK
    for config in configs:
        status = max(status, _one(config, args, log))
    return status


def _one(config, args, log):
    name = storage_name(config)
    try:
        adapter = relstorage_adapter(config)
        if adapter is None:
            log.info('%s is not a relstorage: nothing to migrate', name)
            return OK
        schema = adapter.schema
        version, keep_history = schema.status()
    except Exception as e:
        # Whatever the driver or the options raise: one line, as zodbpack
        # and zodbconvert say it.
        log.error('%s: cannot read its schema: %s', name,
                  ' '.join(str(e).split()) or type(e).__name__)
        return FAILED
    where = schema.describe()
    if version is None:
        log.info('%s: %s holds no relstorage schema: a storage creates '
                 'version %d when it first opens it (create-schema true)',
                 name, where, SCHEMA_VERSION)
        return OK
    if version > SCHEMA_VERSION:
        log.error('%s: %s holds schema version %d, newer than version %d '
                  'that this relstorage knows: upgrade relstorage', name,
                  where, version, SCHEMA_VERSION)
        return FAILED
    steps = migrations.steps(version, SCHEMA_VERSION)
    if not steps:
        log.info('%s: %s holds schema version %d (%s), the version this '
                 'relstorage needs: nothing to do', name, where, version,
                 mode_name(keep_history))
        return OK
    try:
        files = [step.relative_path(schema.DATABASE, keep_history)
                 for step in steps]
    except FileNotFoundError as e:
        log.error('%s: %s', name, e)
        return FAILED
    log.info('%s: %s holds schema version %d (%s); this relstorage needs '
             'version %d: %s', name, where, version, mode_name(keep_history),
             SCHEMA_VERSION, ', '.join(files))
    if args.sql:
        _print_sql(name, where, version, steps, schema.DATABASE,
                   keep_history)
        return OK
    if not args.apply:
        log.warning('%s: run %s %s --apply to upgrade it (stop every other '
                    'client first), or --sql to see the SQL', name,
                    PROGRAM, args.config)
        return FAILED
    if keep_history != schema.keep_history:
        log.error('%s: %s holds a %s schema but the section says '
                  'keep-history %s', name, where, mode_name(keep_history),
                  str(schema.keep_history).lower())
        return FAILED
    try:
        before, applied = schema.migrate()
    except StorageError as e:
        log.error('%s: the upgrade failed: %s', name, e)
        return FAILED
    if applied:
        log.info('%s: upgraded from schema version %d to %d (%s)', name,
                 before, applied[-1].version,
                 ', '.join(step.name for step in applied))
    else:
        log.info('%s: another run upgraded it meanwhile', name)
    return OK


def _print_sql(name, where, version, steps, database, keep_history):
    print(f'-- {name}: {where}, schema version {version} to '
          f'{SCHEMA_VERSION} ({mode_name(keep_history)})')
    for step in steps:
        print(f'\n-- {step.relative_path(database, keep_history)}')
        with open(step.path(database, keep_history), encoding='utf-8') as f:
            sys.stdout.write(f.read())


if __name__ == '__main__':
    sys.exit(main())
