"""Repeated first packs of one database: how far a pack's time and the
writer's p99 during it move from pack to pack, and which of several pack
commands or options does better on the same pages.

    .venv/bin/python benchmarks/pack_repeat.py --backend mysql --mode hp
        --objects 1000000 --repeat 3
        --variant now --variant before=/tmp/old/.venv/bin/zodbpack
        [--option "before=pack-duty-cycle 0.3"] [--rebuild]

pack.py builds a fresh database for each pack (about 20 minutes at
1,000,000 documents on this project's machines), so one run gives one
first pack; and the writer's p99 during it was 1.73 to 2.59 times its p99
alone in runs of nearly the same code (docs/performance.rst, "Packing").
One pack each tells little about a change to the throttle.  Here the
database is built once, into a template (``packrep_template_<mode>``, kept
with a marker file under benchmarks/data/pack_repeat/: a later run with
the same backend, mode, --objects and --seed takes it again unless
--rebuild), and every pack runs on a copy of it page for page
(``clone`` of harness/backends.py: CREATE DATABASE ... TEMPLATE on
PostgreSQL; on MariaDB the tables' files are copied as transportable
tablespaces, so the script must run on the server's machine, as a user
who may write to its datadir).  A copy starts with none of its pages in
the server's cache; so does every pack here, whichever variant.

``--variant NAME[=COMMAND]`` (repeatable): a pack command to which
``--days=-1 CONFIG`` is appended (default: the ``zodbpack`` next to this
interpreter); ``--option "NAME=KEY VALUE"`` adds a line to that variant's
``<relstorage>`` section (the writer's too; it reads no pack option).  A
round packs once with each variant, who goes first alternating (ABBA...).
Each pack: the copy; the server settles (pack.py's settle); the writer
alone for --writer-seconds; the pack, with the writer running; the copy
dropped.  Reported per pack and as each variant's medians: the pack's
seconds, the writer's p50 and p99 alone and during the pack, and p99
during / alone (pack.py's target: at most 2).  The pack logs are kept in
benchmarks/data/pack_repeat/<pid>/ (with ``--debug-throttle``, the
throttle's decisions, batch by batch).
"""
import json
import os
import shlex
import sys
import time
from pathlib import Path

from harness import DATA, backends
from harness.backends import MODES, TITLES, relstorage_zconfig
from harness.cli import Parser
from harness.environment import environment, finish
from harness.figures import median
from harness.report import heading, log, render, run_time, show, \
    write_results
from harness.sides import Turns, prepare

import pack as packbench

HERE = Path(__file__).resolve().parent
TOP = DATA / 'pack_repeat'
WORK = TOP / str(os.getpid())
#: The throttle's logger, set to DEBUG in the pack process with
#: --debug-throttle.
THROTTLE_LOGGER = 'relstorage.pack.throttle'


def parse_args(argv):
    parser = Parser('Repeated first packs of one built database, each on '
                    'a copy: the spread of the pack time and the writer\'s '
                    'p99, variant against variant.')
    parser.add_argument('--backend', choices=('postgresql', 'mysql'),
                        required=True)
    parser.add_argument('--mode', choices=tuple(MODES), default='hp')
    parser.scaled('--objects', 1000000, 20000, help='documents built '
                  '(default 1,000,000; 20,000 with --quick)')
    parser.quick()
    parser.add_argument('--seed', type=int, default=1)
    parser.repeat(3, help='rounds: packs per variant (default 3)')
    parser.add_argument('--variant', action='append', default=[],
                        metavar='NAME[=COMMAND]',
                        help='a pack command (repeatable; default: one, '
                        '"now", the zodbpack next to this interpreter)')
    parser.add_argument('--option', action='append', default=[],
                        metavar='"NAME=KEY VALUE"',
                        help="a line added to variant NAME's <relstorage> "
                        'section (repeatable)')
    parser.add_argument('--debug-throttle', action='store_true',
                        help=f'the pack process logs {THROTTLE_LOGGER} at '
                        'DEBUG (each batch and pause)')
    parser.add_argument('--rebuild', action='store_true',
                        help='build the template again even where one of '
                        'the same size and seed is kept')
    parser.scaled('--writer-seconds', 120, 10, type=float,
                  help='the writer alone before each pack (default 120, '
                  '10 with --quick)')
    parser.add_argument('--writer-pause', type=float, default=0.02,
                        help="seconds between the writer's commits "
                        '(default 0.02)')
    parser.add_argument('--timeout', type=float, default=6 * 3600,
                        help='seconds any one step may take (default 6 h)')
    parser.servers(sqlite_synchronous=False)
    parser.results('pack_repeat.json', keep_data=False)
    args = parser.parse(argv)
    args.variants = variants(parser, args)
    return args


def variants(parser, args):
    """``{name: {'command': [...], 'options': [...]}}`` in the order given;
    a usage error for a name given twice or an option of no variant."""
    out = {}
    for text in args.variant or ['now']:
        name, _, command = text.partition('=')
        name = name.strip()
        if not name.isidentifier():
            parser.error(f'--variant {text!r}: NAME must be a word')
        if name in out:
            parser.error(f'--variant {name!r} given twice')
        words = shlex.split(command) or [str(Path(sys.executable).parent
                                             / 'zodbpack')]
        if not Path(words[0]).exists():
            parser.error(f'--variant {name}: {words[0]} does not exist')
        out[name] = {'command': words, 'options': []}
    for text in args.option:
        name, _, line = text.partition('=')
        if name.strip() not in out or not line.strip():
            parser.error(f'--option {text!r}: NAME=KEY VALUE, NAME one of '
                         f'the variants ({", ".join(out)})')
        out[name.strip()]['options'].append(line.strip())
    return out


class Args:
    """What pack.py's Side, Writer and settle read of its arguments."""

    def __init__(self, args, command):
        self.ours_zodbpack = shlex.join(command)
        self.ref_zodbpack = None
        self.timeout = args.timeout
        self.writer_pause = args.writer_pause
        self.writer_seconds = args.writer_seconds


def debug_wrapper(command):
    """``command`` run by a Python that first sets the throttle's logger
    to DEBUG: the console script's own interpreter (its shebang) runs
    ``-c`` with the script's path."""
    script = Path(command[0])
    first = script.read_text(errors='replace').splitlines()[0]
    if not first.startswith('#!'):
        raise SystemExit(f'--debug-throttle: {script} is not a script '
                         'with a #! line')
    python = shlex.split(first[2:])[0]
    code = ('import logging, runpy, sys; '
            f'logging.getLogger({THROTTLE_LOGGER!r}).setLevel('
            'logging.DEBUG); sys.argv = sys.argv[1:]; '
            'runpy.run_path(sys.argv[0], run_name="__main__")')
    return [python, '-c', code, str(script)] + command[1:]


def template(database, args):
    """The template's name, built now unless a kept one of the same
    backend, mode, size and seed exists; the build's record."""
    name = f'packrep_template_{args.mode}'
    marker = TOP / f'template-{args.backend}-{args.mode}.json'
    wanted = {'objects': args.objects, 'seed': args.seed}
    if not args.rebuild and marker.exists():
        kept = json.loads(marker.read_text())
        if {k: kept.get(k) for k in wanted} == wanted and \
                database.disk_bytes(name):
            log(f'template {name}: kept from {kept["built_at"]} '
                f'({args.objects:,} documents, seed {args.seed})')
            return name, kept
    marker.unlink(missing_ok=True)
    config = WORK / 'template.conf'
    config.write_text(relstorage_zconfig(database, 'ours', name,
                                         MODES[args.mode][1]))
    side = packbench.Side('ours', args.backend, Args(args, ['-']))
    database.create(name)
    log(f'template {name}: build, {args.objects:,} documents, seed '
        f'{args.seed}')
    built = side.workload('build', config, '--objects', args.objects,
                          '--seed', args.seed, timeout=args.timeout)
    built.pop('info', None)
    record = dict(wanted, built_at=time.strftime('%Y-%m-%dT%H:%M:%SZ',
                                                 time.gmtime()),
                  build_seconds=built['seconds'], live=built['live'])
    log(f'template {name}: built in {built["seconds"]:.1f}s')
    marker.write_text(json.dumps(record))
    return name, record


def one_pack(database, source, variant, name, tag, args):
    """Copy ``source``, settle, the writer alone, the pack with the
    writer; the record (``error`` when a step failed)."""
    copy = f'packrep_copy_{args.mode}'
    config = WORK / f'{tag}.conf'
    config.write_text(relstorage_zconfig(database, 'ours', copy,
                                         MODES[args.mode][1],
                                         variant['options']))
    command = variant['command']
    if args.debug_throttle:
        command = debug_wrapper(command)
    side = packbench.Side('ours', args.backend, Args(args, command))
    record = {'variant': name, 'options': variant['options'],
              'command': shlex.join(command)}
    step = 'copy'
    try:
        started = time.monotonic()
        database.clone(source, copy)
        record['copy_seconds'] = time.monotonic() - started
        step = 'settle'
        record['settle'] = packbench.settle(database, tag, args)
        step = 'writer alone'
        record['writer_alone'] = packbench.writer_alone(
            side, config, f'{tag}-alone', args, WORK)
        step = 'pack'
        writer = packbench.Writer(side, config, f'{tag}-pack', args, WORK)
        sampler = None
        try:
            writer.wait_ready()
            sampler = packbench.ServerSampler(database, copy)
            record['pack'] = side.pack(config, -1, WORK / f'{tag}.log',
                                       args.timeout)
        finally:
            if sampler is not None:
                record['server'] = sampler.stop()['summary']
            record['writer_pack'] = writer.stop()
    except (packbench.WorkloadFailed, RuntimeError, OSError) as e:
        record['error'] = f'{step}: {e}'
        log(f'  FAILED: {tag}: {step}:\n{e}')
    finally:
        database.drop(copy)
    record['figures'] = figures(record)
    return record


def figures(record):
    """The pack's seconds and the writer's latencies (ms) of one pack."""
    def p(step, key):
        latency = record.get(step, {}).get('latency', {})
        return None if latency.get(key) is None else latency[key] * 1000

    out = {'pack': record.get('pack', {}).get('seconds'),
           'alone_p50': p('writer_alone', 'p50'),
           'alone_p99': p('writer_alone', 'p99'),
           'pack_p50': p('writer_pack', 'p50'),
           'pack_p99': p('writer_pack', 'p99')}
    if out['pack'] is None:
        out['pack_p50'] = out['pack_p99'] = None
    out['p99_growth'] = (out['pack_p99'] / out['alone_p99']
                         if out['pack_p99'] and out['alone_p99'] else None)
    return out


COLUMNS = (('pack', 's', '{:.1f}'), ('alone_p50', 'ms', '{:.2f}'),
           ('alone_p99', 'ms', '{:.2f}'), ('pack_p50', 'ms', '{:.2f}'),
           ('pack_p99', 'ms', '{:.2f}'), ('p99_growth', 'x', '{:.2f}'))
HEADER = ('pack (s)', 'alone p50', 'alone p99', 'pack p50', 'pack p99',
          'p99 ratio')


def cell(value, form):
    return '-' if value is None else form.format(value)


def table(packs, names):
    """Each pack's row, then each variant's medians and ranges."""
    rows = [(str(p['round'] + 1), p['variant'])
            + tuple(cell(p['figures'][k], f) for k, _, f in COLUMNS)
            for p in packs]
    lines = render(('round', 'variant') + HEADER, rows)
    summary = []
    for name in names:
        mine = [p['figures'] for p in packs if p['variant'] == name]
        for label, pick in (('median', median), ('least', min),
                            ('most', max)):
            summary.append((label, name) + tuple(
                cell(pick([f[k] for f in mine if f[k] is not None])
                     if any(f[k] is not None for f in mine) else None, form)
                for k, _, form in COLUMNS))
    return lines + [''] + render(('', 'variant') + HEADER, summary)


def main(argv=None):
    args = parse_args(argv)
    started = time.monotonic()
    probes = prepare(['ours'], HERE / 'workload.py', log)
    database = backends.database_for(args.backend, args)
    env = environment({args.backend: database.server_version()}, probes)
    WORK.mkdir(parents=True, exist_ok=True)
    lines = heading(env) + [
        f'{TITLES[args.backend]}, {MODES[args.mode][0]}: first packs of '
        f'copies of one build of {args.objects:,} documents (seed '
        f'{args.seed}), {args.repeat} per variant; writer: one small '
        f'commit, then {args.writer_pause:g}s pause, alone '
        f'{args.writer_seconds:g}s before each pack.',
        f'{TITLES[args.backend]} settings: ' + ', '.join(
            f'{k}={v}' for k, v in database.settings().items())]
    for name, variant in args.variants.items():
        lines.append(f'variant {name}: {shlex.join(variant["command"])}'
                     + ''.join(f'; {o}' for o in variant['options']))
    show(lines + [''])
    source, built = template(database, args)
    packs = []
    turns = Turns()
    for round_, name in turns.rounds(list(args.variants), args.repeat):
        tag = f'{round_ + 1}-{name}'
        log(f'round {round_ + 1}, {name}: copy, settle, writer alone, pack')
        record = one_pack(database, source, args.variants[name], name, tag,
                          args)
        record['round'] = round_
        packs.append(record)
        f = record['figures']
        log(f'round {round_ + 1}, {name}: pack {cell(f["pack"], "{:.1f}")}s'
            f', writer p99 {cell(f["alone_p99"], "{:.2f}")} ms alone, '
            f'{cell(f["pack_p99"], "{:.2f}")} during: '
            f'{cell(f["p99_growth"], "{:.2f}")}x')
    text = [''] + table(packs, list(args.variants)) + [
        '', f'Pack logs: {WORK}'] + run_time(started)
    show(text, lines)
    write_results(args.json, {
        'environment': finish(env),
        'settings': {k: getattr(args, k) for k in (
            'backend', 'mode', 'objects', 'quick', 'seed', 'repeat',
            'writer_seconds', 'writer_pause', 'variants', 'debug_throttle')},
        'server_settings': database.settings(),
        'template': built,
        'packs': packs,
        'elapsed_seconds': time.monotonic() - started,
        'report': '\n'.join(lines)})
    return 1 if any('error' in p for p in packs) else 0


if __name__ == '__main__':
    sys.exit(main())
