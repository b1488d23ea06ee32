"""relstorage-query: the common questions, asked of the JSON mirror
(json-state) of the relstorage databases of a ZConfig file.

    relstorage-query [--json] [--limit N] CONFIG classes
    relstorage-query [--json] [--limit N] CONFIG find PATH VALUE [--class M.C]
    relstorage-query [--json] [--limit N] CONFIG refs OID

``classes``: the objects of each class and the bytes of their pickles,
most objects first.  ``find``: the objects whose state holds VALUE at
PATH (keys joined by dots: ``data.title`` for a PersistentMapping's
``title``); VALUE is read as JSON where it is a JSON number, ``true``,
``false``, ``null`` or a quoted string, else as text.  ``refs``: the
objects whose state refers to OID (decimal, or hexadecimal with ``0x``).
Reads only the mirror (docs/json.rst), never a pickle; objects whose
JSON is missing (``relstorage-mirror --check``) are not seen.  Other
storage sections are passed over.

Exit status: 0 done; 1 a database could not be asked (no mirror in its
schema, an error); 2 bad input.
"""
import argparse
import json
import sys

from relstorage.cli import BAD_INPUT
from relstorage.cli import command_parser
from relstorage.cli import each_adapter
from relstorage.cli import load_or_report
from relstorage.cli import setup_logging

PROGRAM = 'relstorage-query'
#: The schema version that added the mirror (migrations/0007-json).
MIRROR_VERSION = 7


def oid_value(text):
    """argparse type of an oid: decimal, or hexadecimal with 0x."""
    try:
        value = int(text, 16) if text.lower().startswith('0x') else int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2 ** 64:
        raise argparse.ArgumentTypeError(f'{text!r} is not an oid')
    return value


def json_scalar(text):
    """argparse type of find's VALUE."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, (list, dict)):
        raise argparse.ArgumentTypeError(
            f'{text!r}: give one value (text, a number, true, false, '
            f'null), not a list or an object')
    return value


def class_name(text):
    module, _, name = text.rpartition('.')
    if not module or not name:
        raise argparse.ArgumentTypeError(
            f'{text!r} is not module.Class')
    return module, name


def limit_value(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f'{text!r} is not a positive '
                                         f'number')
    return value


def parser():
    p = command_parser(
        PROGRAM,
        'Ask the JSON mirror (json-state) of the relstorage databases of '
        'a ZConfig file: objects by class, by the value of an attribute, '
        'and who refers to an object.',
        '%%import relstorage and one or more storage sections',
        quiet=False)
    p.add_argument('--json', action='store_true',
                   help='print one JSON document (a list, a dict per '
                        'storage)')
    p.add_argument('--limit', type=limit_value, default=100,
                   help='objects listed at most (default %(default)s)')
    questions = p.add_subparsers(dest='question', required=True,
                                 metavar='QUESTION')
    questions.add_parser('classes', help='objects and pickle bytes by '
                                         'class')
    find = questions.add_parser(
        'find', help='objects whose state holds VALUE at PATH')
    find.add_argument('path', metavar='PATH',
                      help='keys joined by dots, e.g. data.title')
    find.add_argument('value', metavar='VALUE', type=json_scalar)
    find.add_argument('--class', dest='cls', type=class_name,
                      metavar='MODULE.CLASS', help='only objects of this '
                      'class')
    refs = questions.add_parser('refs',
                                help='objects whose state refers to OID')
    refs.add_argument('oid', metavar='OID', type=oid_value)
    return p


def ask(adapter, args):
    """The answer to ``args.question`` on ``adapter``'s database: a list
    of dicts.  Raises ValueError where the database has no mirror."""
    if not adapter.capabilities.json_mirror:
        raise ValueError('this database has no JSON mirror')
    version, _ = adapter.schema.status()
    if version is None:
        raise ValueError('the database holds no relstorage schema')
    if version < MIRROR_VERSION:
        raise ValueError(
            f'its schema (version {version}) has no JSON mirror: '
            f'run relstorage-migrate, then relstorage-mirror')
    cm, mirror = adapter.connmanager, adapter.mirror
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        cm.begin_analysis(conn, cursor)
        if args.question == 'classes':
            return [{'class': f'{module}.{name}', 'objects': count,
                     'pickle_bytes': size}
                    for module, name, count, size in mirror.classes(cursor)]
        if args.question == 'find':
            rows = mirror.find(cursor, args.path.split('.'), args.value,
                               args.cls, args.limit)
        else:
            rows = mirror.referring(cursor, args.oid, args.limit)
        return [{'oid': zoid, 'class': f'{module}.{name}'}
                for zoid, module, name in rows]
    finally:
        cm.close(conn, cursor)


def main(argv=None):
    args = parser().parse_args(argv)
    log = setup_logging(PROGRAM, quiet=True)
    configs = load_or_report(PROGRAM, args.config)
    if configs is None:
        return BAD_INPUT
    status, found = each_adapter(
        configs, log, lambda adapter: ask(adapter, args), 'cannot ask it')
    if args.json:
        print(json.dumps([{'storage': name, 'answer': answer}
                          for name, answer in found], indent=2))
    else:
        for name, answer in found:
            print(_text(name, answer))
    return status


def _text(name, answer):
    lines = [name]
    if not answer:
        lines.append('  (none)')
    elif 'objects' in answer[0]:
        lines.append(f'  {"objects":>12}  {"pickle bytes":>16}  class')
    for row in answer:
        if 'objects' in row:
            lines.append(f'  {row["objects"]:>12,}  {row["pickle_bytes"]:>16,}'
                         f'  {row["class"]}')
        else:
            lines.append(f'  0x{row["oid"]:016x}  {row["class"]}')
    return '\n'.join(lines)


if __name__ == '__main__':
    sys.exit(main())
