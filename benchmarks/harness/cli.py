"""The benchmarks' argument parser: the options every comparison shares,
spelled and parsed the same way, and each script's own on top.

    parser = cli.Parser('What the script measures.')
    parser.choice('backends', BACKENDS)            # --backends a,b
    parser.choice('modes', MODES, default='hp')    # --modes hp
    parser.quick()
    parser.scaled('--objects', 20000, 2000, help='...')
    parser.repeat(3)
    parser.servers()                               # --pg-dsn, --mysql-*
    parser.round_trips()                           # --round-trips, --rtt
    parser.results('latest.json')                  # --json, --keep-data
    args = parser.parse(argv)

A ``choice`` becomes the list of names chosen (``none``: none), each
checked; a ``scaled`` option gets its small default with ``--quick``.
"""
import argparse

from . import RESULTS

SYNCHRONOUS = ('default', 'off', 'normal', 'full')


def choose(parser, text, allowed, what):
    """The names of the comma-separated ``text`` (``none``: none), each
    one of ``allowed``; else a usage error naming ``what``."""
    chosen = [n.strip() for n in text.split(',') if n.strip()]
    chosen = [n for n in chosen if n != 'none']
    for n in chosen:
        if n not in allowed:
            parser.error(f'unknown {what} {n!r}')
    return chosen


class Parser(argparse.ArgumentParser):
    """An ArgumentParser with the benchmarks' shared options."""

    def __init__(self, description, **kwargs):
        super().__init__(description=description, **kwargs)
        self._choices = []
        self._scaled = []
        self._json = None

    def choice(self, name, allowed, default=None, what=None, **options):
        """``--NAME a,b``: some of ``allowed`` (default: all of them)."""
        if default is None:
            default = ','.join(allowed)
        options.setdefault('help', 'comma-separated: ' + ', '.join(allowed))
        self.add_argument(f'--{name}', default=default, **options)
        self._choices.append((name, tuple(allowed),
                              what or name.rstrip('s')))

    def quick(self, **options):
        options.setdefault('help', 'a small run: a smoke test, not a '
                           'measurement')
        self.add_argument('--quick', action='store_true', **options)

    def scaled(self, option, full, small, **options):
        """An option whose default is ``small`` with --quick."""
        options.setdefault('type', int)
        self.add_argument(option, **options)
        self._scaled.append((option.lstrip('-').replace('-', '_'), full,
                             small))

    def repeat(self, default, **options):
        options.setdefault('help', f'runs per side (default {default})')
        self.add_argument('--repeat', type=int, default=default, **options)

    def servers(self, sqlite_synchronous=True,
                pg_dsn='host=127.0.0.1 port=5432 user=root'):
        """Where the servers are (every benchmark's), and SQLite's
        synchronous pragma."""
        self.add_argument('--pg-dsn', default=pg_dsn,
                          help='libpq connection string without dbname; '
                          'the user must be allowed to create databases')
        self.add_argument('--mysql-host', default='127.0.0.1')
        self.add_argument('--mysql-port', type=int, default=3306)
        self.add_argument('--mysql-user', default='root',
                          help='must be allowed to create databases')
        self.add_argument('--mysql-passwd', '--mysql-password', default='',
                          dest='mysql_passwd')
        if sqlite_synchronous:
            self.add_argument(
                '--sqlite-synchronous', default='default',
                choices=SYNCHRONOUS,
                help="SQLite's synchronous pragma for both sides; default "
                'leaves each its own (FULL for ours, NORMAL for 4.3)')

    def round_trips(self):
        """``--round-trips`` and ``--rtt MS`` (harness/roundtrips.py).  After
        ``parse``, ``args.rtt`` is the latency to add (0.0 with
        ``--round-trips`` alone) or None when neither is given, and
        ``args.round_trips`` is true with either."""
        self.add_argument(
            '--round-trips', action='store_true',
            help="route every side's database connections through a relay "
            'process (no added latency) and report the round trips per '
            'operation of every phase; SQLite, FileStorage and ZEO are '
            'skipped')
        self.add_argument(
            '--rtt', type=float, metavar='MS',
            help='the same through a relay that adds MS milliseconds to '
            'every round trip (half each way); the times include it')

    def results(self, name, quick_name=None, keep_data=True,
                keep_help='keep the databases and files of the run'):
        """``--json`` (default ``benchmarks/results/NAME``, QUICK_NAME with
        --quick) and ``--keep-data``."""
        self._json = (name, quick_name)
        self.add_argument('--json', help='where to write the results '
                          f'(default benchmarks/results/{name}'
                          + (f', {quick_name} with --quick)' if quick_name
                             else ')'))
        if keep_data:
            self.add_argument('--keep-data', action='store_true',
                              help=keep_help)

    def parse(self, argv=None):
        args = self.parse_args(argv)
        quick = getattr(args, 'quick', False)
        for name, full, small in self._scaled:
            if getattr(args, name) is None:
                setattr(args, name, small if quick else full)
        for name, allowed, what in self._choices:
            setattr(args, name, choose(self, getattr(args, name), allowed,
                                       what))
        if self._json and args.json is None:
            name, quick_name = self._json
            args.json = str(RESULTS / (quick_name if quick and quick_name
                                       else name))
        if hasattr(args, 'rtt'):
            if args.rtt is not None:
                if args.rtt < 0:
                    self.error('--rtt must not be negative')
                args.round_trips = True
            elif args.round_trips:
                args.rtt = 0.0
        if getattr(args, 'repeat', 1) is not None and \
                getattr(args, 'repeat', 1) < 1:
            self.error('--repeat must be at least 1')
        return args
