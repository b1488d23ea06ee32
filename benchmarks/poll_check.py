"""Whether MariaDB/MySQL's snapshots can hide a committed change from our
poll: the statements of relstorage's history-free MySQL adapter, in plain
SQL, checked row by row.

    .venv/bin/python benchmarks/poll_check.py [--threads 4] [--seconds 120]
        [--objects 20000] [--update]

Each thread does what a soak worker's storage does: it polls (``ROLLBACK``,
``START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY`` and the adapter's
``POLL``: the last tid and the rows changed after the previous poll's),
applies the change list to what it knows of every row's tid, and reads 50
random rows by primary key in the same snapshot: a tid that differs from
what the polls told it is a change a poll missed.  Then it commits two
random rows on its other connection as the adapter's finish does (row
locks, the commit row's UPDATE that is the commit lock, the rows written
with ``REPLACE``, or ``UPDATE`` with ``--update``, ``COMMIT``,
``SET autocommit = 1``, and in the same batch the next snapshot and its
poll), and takes that snapshot as its next one, the connections swapping
roles, as ``_take_commit_snapshot`` does.  Every other round polls afresh.
With ``--chain`` each commit also records the tid it followed, and every
poll reads those records and goes only as far as they are visible in its
snapshot (the fix this check suggests).  The database ``pollcheck`` is
made and dropped.  Exit status 1 if a change was missed
(docs/performance.rst, "Soak").
"""
import argparse
import random
import sys
import threading
import time

import MySQLdb
from MySQLdb.constants import CLIENT

# The adapter's own statements and its batch runner (every result set).
from relstorage.adapters.mysql.connection import SNAPSHOT_BEGIN as BEGIN
from relstorage.adapters.mysql.connection import run_batch as batch
from relstorage.adapters.mysql.poll import HistoryFreePoller

NAME = 'pollcheck'
POLL = HistoryFreePoller.POLL


def connect(args, db=NAME):
    keys = {'db': db} if db else {}
    return MySQLdb.connect(host=args.host, port=args.port, user=args.user,
                           passwd=args.passwd,
                           client_flag=CLIENT.MULTI_STATEMENTS, **keys)


def create(args):
    conn = connect(args, db=None)
    cursor = conn.cursor()
    cursor.execute(f'DROP DATABASE IF EXISTS {NAME}')
    cursor.execute(f'CREATE DATABASE {NAME}')
    cursor.execute(f'USE {NAME}')
    cursor.execute('CREATE TABLE commit_row (id INT PRIMARY KEY, '
                   'tid BIGINT NOT NULL)')
    cursor.execute('INSERT INTO commit_row VALUES (0, 1)')
    cursor.execute('CREATE TABLE object_state (zoid BIGINT PRIMARY KEY, '
                   'tid BIGINT NOT NULL, state LONGBLOB, KEY (tid))')
    # --chain: each commit's tid and the one it followed.
    cursor.execute('CREATE TABLE commit_chain (tid BIGINT PRIMARY KEY, '
                   'prev BIGINT NOT NULL)')
    for first in range(0, args.objects, 1000):
        cursor.executemany('INSERT INTO object_state VALUES (%s, 1, %s)', [
            (zoid, b'x' * 200)
            for zoid in range(first, min(args.objects, first + 1000))])
    conn.commit()
    conn.close()


CHAIN = 'SELECT tid, prev FROM commit_chain WHERE tid > %s'


def visible_end(prev, last, links):
    """With ``--chain``: the last tid up to which every commit after
    ``prev`` is visible, following the links ``(tid, prev)`` read in the
    same snapshot from ``prev``; ``last`` when the chain reaches it."""
    following = {before: tid for tid, before in links}
    end = prev
    while end in following and following[end] <= last:
        end = following[end]
    return end


def worker(args, seed, stop, totals, missed, torn):
    rng = random.Random(seed)
    load, store = connect(args), connect(args)
    cursor = load.cursor()
    rows = batch(cursor, f'{BEGIN}; {POLL}', (2 ** 62,))[-1]
    prev = next(tid for zoid, tid in rows if zoid == -1)
    known = dict(batch(cursor, 'SELECT zoid, tid FROM object_state')[-1])
    adopted = None
    polls = commits = 0
    while not stop.is_set():
        after_commit = adopted is not None
        if after_commit:
            (rows, links), adopted = adopted, None
        else:
            if args.chain:
                *_, rows, links = batch(
                    cursor, f'ROLLBACK; {BEGIN}; {POLL}; {CHAIN}',
                    (prev, prev))
            else:
                rows = batch(cursor, f'ROLLBACK; {BEGIN}; {POLL}',
                             (prev,))[-1]
            polls += 1
        last = next(tid for zoid, tid in rows if zoid == -1)
        if args.chain:
            end = visible_end(prev, last, links)
            if end != last:
                # A later commit visible, an earlier one not: this poll
                # goes as far as the earlier one only.
                torn.append((prev, end, last))
                last = end
        for zoid, tid in rows:
            if zoid != -1 and tid <= last:
                known[zoid] = tid
        sample = ','.join(map(str, rng.sample(range(args.objects), 50)))
        for zoid, tid in batch(cursor, 'SELECT zoid, tid FROM object_state '
                               f'WHERE zoid IN ({sample})')[-1]:
            if tid != known.get(zoid) and tid <= last:
                # (A row changed after ``last``, where a poll with
                # --chain stopped, is the next poll's to report.)
                missed.append((zoid, known.get(zoid), tid, prev, last))
                known[zoid] = tid
        prev = last
        if after_commit:
            continue        # a fresh poll next, as at a request's begin
        oids = sorted(rng.sample(range(args.objects), 2))
        listed = ','.join(map(str, oids))
        if args.update:
            moves = '; '.join(
                f"UPDATE object_state SET tid = @t, state = REPEAT('y', 200) "
                f'WHERE zoid = {zoid}' for zoid in oids)
        else:
            moves = ('REPLACE INTO object_state (zoid, tid, state) VALUES '
                     + ','.join(f"({zoid}, @t, REPEAT('y', 200))"
                                for zoid in oids))
        other = store.cursor()
        batch(other, 'ROLLBACK; SET autocommit = 0; BEGIN; SELECT zoid, tid '
              f'FROM object_state WHERE zoid IN ({listed}) FOR UPDATE')
        lock = release = ''
        if args.get_lock:
            # A lock of the session, released after the COMMIT returns.
            lock = f"DO GET_LOCK('{NAME}.commit', 10); "
            release = f"DO RELEASE_LOCK('{NAME}.commit'); "
        chain = ('INSERT INTO commit_chain VALUES (@t, @t - 1); '
                 if args.chain else '')
        found = batch(other, (
            f'{lock}UPDATE commit_row SET tid = tid + 1 WHERE id = 0; '
            'SET @t = (SELECT tid FROM commit_row WHERE id = 0); '
            f'{chain}{moves}; COMMIT; {release}SET autocommit = 1; '
            f'SELECT @t; {BEGIN}; {POLL}' + (f'; {CHAIN}' if args.chain
                                             else '')),
            (prev, prev) if args.chain else (prev,))
        adopted = (found[-2], found[-1]) if args.chain else (found[-1], ())
        commits += 1
        load, store = store, load
        cursor = load.cursor()
    load.close()
    store.close()
    totals.append((polls, commits))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--threads', type=int, default=4)
    parser.add_argument('--seconds', type=float, default=120)
    parser.add_argument('--objects', type=int, default=20000)
    parser.add_argument('--update', action='store_true',
                        help='write the rows with UPDATE, not REPLACE')
    parser.add_argument('--get-lock', action='store_true',
                        help='also hold GET_LOCK from before the commit '
                             'row\'s UPDATE until after the COMMIT')
    parser.add_argument('--chain', action='store_true',
                        help='each commit records the tid it followed; '
                             'every poll goes only as far as that chain is '
                             'visible in its snapshot')
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=3306)
    parser.add_argument('--user', default='root')
    parser.add_argument('--passwd', default='')
    args = parser.parse_args(argv)
    create(args)
    stop, totals, missed, torn = threading.Event(), [], [], []
    threads = [threading.Thread(target=worker,
                                args=(args, seed, stop, totals, missed,
                                      torn))
               for seed in range(args.threads)]
    for thread in threads:
        thread.start()
    time.sleep(args.seconds)
    stop.set()
    for thread in threads:
        thread.join()
    conn = connect(args, db=None)
    conn.cursor().execute(f'DROP DATABASE {NAME}')
    conn.close()
    polls = sum(p for p, _ in totals)
    commits = sum(c for _, c in totals)
    print(f'{args.threads} threads, {args.seconds:g} s: {polls:,} fresh '
          f'polls, {commits:,} commits (each followed by its snapshot), '
          f'{len(missed)} missed changes'
          + (f'; {len(torn)} polls saw a later commit without an earlier '
             'one and stopped before it' if args.chain else ''))
    for zoid, known, tid, prev, last in missed[:20]:
        print(f'  row {zoid}: polls said {known}, the snapshot has {tid} '
              f'(polled after {prev}, up to {last})')
    return 1 if missed else 0


if __name__ == '__main__':
    sys.exit(main())
