"""Whether a MariaDB/MySQL snapshot can hide a committed change from our
poll: relstorage's MySQL adapter, polling and committing as a storage
does, checked row by row.

    .venv/bin/python benchmarks/poll_check.py [--threads 8] [--seconds 120]
        [--objects 20000] [--keep-history] [--no-check]

Each thread does what a soak worker's storage does, with the adapter's own
calls: it polls (``poller.begin_and_poll`` after the previous poll's tid,
which ends the last snapshot and begins the next in one round trip),
applies the change list to what it knows of every row's tid, and reads 50
random rows by primary key in the same snapshot: a tid that differs from
what the polls told it is a change a poll missed.  Then it commits two
random rows on its other connection (``locker.lock_for_vote``, then
``txncontrol.finish_and_commit`` with the rows inline and, in the same
round trip, the next snapshot and its poll: ``poller.poll_after_commit``),
and takes that snapshot as its next one, the connections swapping roles,
as the storage's ``_take_commit_snapshot`` does.  Every other round polls
afresh.

InnoDB can show a snapshot a commit without the one before it
(relstorage/adapters/mysql/chain.py): the adapter finds such a *torn*
snapshot by the commit chain and begins another.  ``--no-check`` turns
that off (the adapter as it was before schema step 0009) to show what it
prevents.  The database ``pollcheck`` is made and dropped.  Exit status 1
if a change was missed (docs/performance.rst, "Soak").
"""
import argparse
import random
import sys
import threading
import time

from relstorage.adapters.mysql import MySQLAdapter
from relstorage.adapters.mysql import poll as mysql_poll
from relstorage.adapters.poll import TORN
from relstorage.adapters.poll import split_poll
from relstorage.config.options import Options

NAME = 'pollcheck'


def adapter_for(args, db=NAME):
    adapter = MySQLAdapter(host=args.host, port=args.port, user=args.user,
                           passwd=args.passwd, db=db)
    adapter.configure(Options(keep_history=args.keep_history))
    return adapter


def create(args):
    server = adapter_for(args, db='mysql').connmanager
    with server.write_session('making the database') as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS {NAME}')
        cursor.execute(f'CREATE DATABASE {NAME}')
    adapter = adapter_for(args)
    adapter.schema.prepare(create=True)
    cm = adapter.connmanager
    conn, cursor = cm.open_store()
    try:
        cm.begin_store(conn, cursor)
        for first in range(0, args.objects, 200):
            rows = [(oid, 0, b'x' * 200, 0) for oid in
                    range(first, min(args.objects, first + 200))]
            adapter.txncontrol.finish_and_commit(
                cursor, b'', b'', b'', ' ', rows=rows, seconds=0.0)
            cm.begin_store(conn, cursor)
    finally:
        cm.close(conn, cursor)
    return adapter


def drop(args):
    server = adapter_for(args, db='mysql').connmanager
    with server.write_session('dropping the database') as cursor:
        cursor.execute(f'DROP DATABASE {NAME}')


def worker(args, adapter, seed, stop, totals, missed, torn_adopted):
    rng = random.Random(seed)
    cm, poller = adapter.connmanager, adapter.poller
    table = 'current_object' if args.keep_history else 'object_state'
    load, store = cm.open_store(), cm.open_store()
    prev, _ = poller.begin_and_poll(cm, *load, None)
    cursor = load[1]
    cursor.execute(f'SELECT zoid, tid FROM {table}')
    known = dict(cursor.fetchall())
    adopted = None
    polls = commits = 0
    while not stop.is_set():
        after_commit = adopted is not None
        if after_commit:
            (last, changes), adopted = adopted, None
        else:
            last, changes = poller.begin_and_poll(
                cm, *load, prev, end_previous=True)
            polls += 1
        for oid, tid in changes:
            known[oid] = tid
        cursor = load[1]
        sample = ','.join(map(str, rng.sample(range(args.objects), 50)))
        cursor.execute(f'SELECT zoid, tid FROM {table} '
                       f'WHERE zoid IN ({sample})')
        for oid, tid in cursor.fetchall():
            if tid != known.get(oid):
                missed.append((oid, known.get(oid), tid, prev, last))
                known[oid] = tid
        prev = last
        if after_commit:
            continue        # a fresh poll next, as at a request's begin
        oids = sorted(rng.sample(range(args.objects), 2))
        conn, other = store
        cm.rollback(conn, other)
        cm.begin_store(conn, other)
        locked, _ = adapter.locker.lock_for_vote(other, oids, [],
                                                 staged=False)
        rows = [(oid, locked[oid], b'y' * 200, 0) for oid in oids]
        _, found = adapter.txncontrol.finish_and_commit(
            other, b'', b'', b'', ' ', rows=rows, seconds=0.0,
            then=poller.poll_after_commit(cm, prev))
        if args.no_check:
            found = [row for row in found if row[0] != TORN]
        polled = split_poll(found)
        if polled[0] is None:
            # Torn: not taken (snapshot.py); the next round polls afresh.
            torn_adopted.append(prev)
        else:
            adopted = polled
        commits += 1
        load, store = store, load
    for conn, cursor in (load, store):
        cm.close(conn, cursor)
    totals.append((polls, commits))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--threads', type=int, default=8)
    parser.add_argument('--seconds', type=float, default=120)
    parser.add_argument('--objects', type=int, default=20000)
    parser.add_argument('--keep-history', action='store_true',
                        help='a history-preserving database')
    parser.add_argument('--no-check', action='store_true',
                        help='take torn snapshots as they are (as before '
                             'the commit chain)')
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=3306)
    parser.add_argument('--user', default='root')
    parser.add_argument('--passwd', default='')
    args = parser.parse_args(argv)
    if args.no_check:
        mysql_poll.begin_whole = lambda begin: (begin(False)[1], 0)
    adapter = create(args)
    stop, totals, missed, torn_adopted = (threading.Event(), [], [], [])
    threads = [threading.Thread(target=worker,
                                args=(args, adapter, seed, stop, totals,
                                      missed, torn_adopted))
               for seed in range(args.threads)]
    for thread in threads:
        thread.start()
    time.sleep(args.seconds)
    stop.set()
    for thread in threads:
        thread.join()
    drop(args)
    polls = sum(p for p, _ in totals)
    commits = sum(c for _, c in totals)
    print(f'{args.threads} threads, {args.seconds:g} s, '
          f'{"history-preserving" if args.keep_history else "history-free"}'
          f'{", no check" if args.no_check else ""}: {polls:,} fresh '
          f'polls, {commits:,} commits (each followed by its snapshot), '
          f'{len(missed)} missed changes; torn snapshots begun again: '
          f'{adapter.connmanager.torn_snapshots} at a poll, '
          f'{len(torn_adopted)} after a commit (not taken)')
    for oid, known, tid, prev, last in missed[:20]:
        print(f'  row {oid}: polls said {known}, the snapshot has {tid} '
              f'(polled after {prev}, up to {last})')
    return 1 if missed else 0


if __name__ == '__main__':
    sys.exit(main())
