"""relstorage's quick start: a ZODB database in SQLite, used by two processes.

    python examples/quickstart.py [--config examples/sqlite.conf]
        [--objects 3000] [--per-transaction 250]

This process opens the database described by a ZConfig file, commits
``--objects`` new objects in transactions of ``--per-transaction``, then
starts a second process that opens the same database, reads every object
back and checks them.  Running it again adds another batch to the same
database.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import ZODB.config
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping


def open_db(config):
    with open(config) as f:
        return ZODB.config.databaseFromFile(f)


def write(args):
    db = open_db(args.config)
    try:
        with db.transaction('create the catalog') as conn:
            if 'books' not in conn.root():
                conn.root()['books'] = OOBTree()
        started = time.perf_counter()
        first = None
        transactions = 0
        for start in range(0, args.objects, args.per_transaction):
            with db.transaction(f'add books from {start}') as conn:
                books = conn.root()['books']
                if first is None:
                    first = len(books)
                for i in range(start, min(start + args.per_transaction,
                                          args.objects)):
                    number = first + i
                    books[f'book-{number:08d}'] = PersistentMapping(
                        title=f'Book number {number}', number=number)
            transactions += 1
        elapsed = time.perf_counter() - started
        print(f'process {os.getpid()}: committed {args.objects} objects in '
              f'{transactions} transactions in {elapsed:.2f}s '
              f'({args.objects / elapsed:.0f} objects/s)')
    finally:
        db.close()


def read(args):
    db = open_db(args.config)
    try:
        started = time.perf_counter()
        with db.transaction() as conn:
            books = conn.root()['books']
            count = 0
            total = 0
            for key, book in books.items():
                if key != f'book-{book["number"]:08d}':
                    raise SystemExit(f'{key} holds book {book["number"]}')
                count += 1
                total += book['number']
        elapsed = time.perf_counter() - started
        print(json.dumps({'pid': os.getpid(), 'count': count, 'sum': total,
                          'seconds': round(elapsed, 3),
                          'storage': db.storage.getName()}))
    finally:
        db.close()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--config', default=os.path.join(here, 'sqlite.conf'))
    parser.add_argument('--objects', type=int, default=3000)
    parser.add_argument('--per-transaction', type=int, default=250)
    parser.add_argument('--read', action='store_true',
                        help='(used for the second process) read and check')
    args = parser.parse_args()
    if args.read:
        read(args)
        return
    write(args)
    child = subprocess.run(
        [sys.executable, __file__, '--read', '--config', args.config],
        capture_output=True, text=True, timeout=600)
    if child.returncode:
        sys.stderr.write(child.stderr)
        raise SystemExit('the second process failed')
    report = json.loads(child.stdout)
    count = report['count']
    expected_sum = count * (count - 1) // 2
    if report['sum'] != expected_sum:
        raise SystemExit(f'second process read a sum of {report["sum"]}, '
                         f'expected {expected_sum}')
    print(f'process {report["pid"]}: read back all {count} objects of '
          f'{report["storage"]} in {report["seconds"]:.2f}s; every one '
          f'checked')


if __name__ == '__main__':
    main()
