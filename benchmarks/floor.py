"""The floor: the benchmark's rows written and read with the bare driver.

    python floor.py {postgresql,mysql,sqlite} --out FILE --objects N
                    --size BYTES [--repeat R] [--latency-commits C] ...

Run by run.py under the project's interpreter.  No ZODB and no storage:
one table ``floor_state (zoid, tid, state)`` and, for the same numbers of
rows of the mean pickle size as the workload, the cheapest statements each
driver offers for the shape of each phase:

add (100 and 1000 per transaction)
    a multi-row INSERT per transaction, then COMMIT;
update (1000 per transaction)
    one statement changing 1000 rows (PostgreSQL ``UPDATE ... FROM
    (VALUES ...)``, MariaDB a multi-row ``INSERT ... ON DUPLICATE KEY
    UPDATE`` of rows that all exist, SQLite ``executemany`` of an UPDATE
    inside one transaction), then COMMIT;
read
    one ``SELECT state, tid ... WHERE zoid = ?`` per row, each timed: the
    shape of a cold load (median pass of ``--repeat``); on PostgreSQL a
    prepared statement (``PREPARE``/``EXECUTE``), the cheaper form, with
    the plain-text SELECT measured once for information; mysqlclient has
    no prepared statements, and sqlite3 caches its own;
small commit
    a single-row UPDATE and COMMIT.

Every phase checks the rows it wrote or read.  With ``--relay-control``
(run.py ``--round-trips``, ``--rtt``) each phase also records the round
trips it made through the relay, with its operations (roundtrips.py).
"""
import argparse
import hashlib
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from roundtrips import RoundTrips  # noqa: E402
from workload import TREES, percentiles, split  # noqa: E402

perf = time.perf_counter


def floor_rows(count, size, salt):
    """``count`` (oid, state) rows of ``size`` bytes each."""
    rows = []
    for oid in range(1, count + 1):
        seed = hashlib.sha256(f'{salt}:{oid}'.encode()).digest()
        rows.append((oid, (seed * (size // len(seed) + 1))[:size]))
    return rows


class PostgreSQL:
    placeholder = '%s'

    def __init__(self, args):
        import psycopg2
        import psycopg2.extras
        self.extras = psycopg2.extras
        self.conn = psycopg2.connect(args.dsn)
        self.cur = self.conn.cursor()
        self.cur.execute('SHOW server_version')
        self.info = {'server_version': self.cur.fetchone()[0],
                     'driver': 'psycopg2 ' + psycopg2.__version__.split()[0]}

    def reset(self):
        self.cur.execute('DROP TABLE IF EXISTS floor_state')
        self.cur.execute('CREATE TABLE floor_state (zoid BIGINT PRIMARY KEY, '
                         'tid BIGINT NOT NULL, state BYTEA NOT NULL)')
        self.conn.commit()

    def insert(self, rows):
        self.extras.execute_values(
            self.cur, 'INSERT INTO floor_state (zoid, tid, state) VALUES %s',
            [(oid, 1, state) for oid, state in rows], page_size=len(rows))
        self.conn.commit()

    def update(self, rows):
        self.extras.execute_values(
            self.cur, 'UPDATE floor_state f SET state = v.state, tid = 2 '
            'FROM (VALUES %s) AS v (zoid, state) WHERE f.zoid = v.zoid',
            rows, page_size=len(rows))
        self.conn.commit()

    def select(self, oid):
        # A prepared statement: the server plans it once per session.  The
        # plain-text form is measured too, for information (extra()).
        if not self.prepared:
            self.cur.execute('PREPARE floor_load (BIGINT) AS SELECT state, '
                             'tid FROM floor_state WHERE zoid = $1')
            self.prepared = True
        self.cur.execute('EXECUTE floor_load (%s)', (oid,))
        return self.cur.fetchone()

    prepared = False

    def end_read(self):
        self.conn.commit()

    def small_commit(self, tid):
        self.cur.execute('UPDATE floor_state SET tid = %s WHERE zoid = 1',
                         (tid,))
        self.conn.commit()

    def totals(self):
        self.cur.execute('SELECT COUNT(*), COALESCE(SUM(LENGTH(state)), 0) '
                         'FROM floor_state')
        got = self.cur.fetchone()
        self.conn.commit()
        return tuple(got)

    def extra(self, rows):
        """Informational: the SELECT by primary key as plain text, planned
        at every call; every row in one COPY, one transaction."""
        count = len(rows)
        start = perf()
        for oid in range(1, count + 1):
            self.cur.execute('SELECT state, tid FROM floor_state '
                             'WHERE zoid = %s', (oid,))
            if self.cur.fetchone() is None:
                raise AssertionError(f'floor row {oid} missing')
        self.conn.commit()
        seconds = perf() - start
        out = {'select_text': {'seconds': seconds, 'objects': count,
                               'rate': count / seconds}}
        self.reset()
        buffer = io.StringIO()
        for oid, state in rows:
            buffer.write(f'{oid}\t1\t\\\\x{state.hex()}\n')
        buffer.seek(0)
        start = perf()
        self.cur.copy_expert(
            'COPY floor_state (zoid, tid, state) FROM STDIN', buffer)
        self.conn.commit()
        seconds = perf() - start
        out['copy_all'] = {'seconds': seconds, 'objects': len(rows),
                           'rate': len(rows) / seconds}
        return out

    def close(self):
        self.cur.execute('DROP TABLE IF EXISTS floor_state')
        self.conn.commit()
        self.conn.close()


class MariaDB:
    """mysqlclient, whose ``executemany`` sends an INSERT (with or without
    ON DUPLICATE KEY UPDATE) as one multi-row statement."""

    def __init__(self, args):
        import MySQLdb
        from importlib import metadata
        self.conn = MySQLdb.connect(host=args.host, port=args.port,
                                    user=args.user, passwd=args.passwd,
                                    db=args.db)
        self.cur = self.conn.cursor()
        self.cur.execute('SELECT version()')
        self.info = {'server_version': self.cur.fetchone()[0],
                     'driver': 'mysqlclient '
                     + metadata.version('mysqlclient')}

    def reset(self):
        self.cur.execute('DROP TABLE IF EXISTS floor_state')
        self.cur.execute('CREATE TABLE floor_state ('
                         'zoid BIGINT UNSIGNED NOT NULL PRIMARY KEY, '
                         'tid BIGINT UNSIGNED NOT NULL, '
                         'state LONGBLOB NOT NULL) ENGINE = InnoDB')
        self.conn.commit()

    def insert(self, rows):
        self.cur.executemany(
            'INSERT INTO floor_state (zoid, tid, state) VALUES (%s, %s, %s)',
            [(oid, 1, state) for oid, state in rows])
        self.conn.commit()

    def update(self, rows):
        self.cur.executemany(
            'INSERT INTO floor_state (zoid, tid, state) VALUES (%s, %s, %s) '
            'ON DUPLICATE KEY UPDATE tid = VALUES(tid), '
            'state = VALUES(state)',
            [(oid, 2, state) for oid, state in rows])
        self.conn.commit()

    def select(self, oid):
        self.cur.execute('SELECT state, tid FROM floor_state WHERE zoid = %s',
                         (oid,))
        return self.cur.fetchone()

    def end_read(self):
        self.conn.commit()

    def small_commit(self, tid):
        self.cur.execute('UPDATE floor_state SET tid = %s WHERE zoid = 1',
                         (tid,))
        self.conn.commit()

    def totals(self):
        self.cur.execute('SELECT COUNT(*), COALESCE(SUM(LENGTH(state)), 0) '
                         'FROM floor_state')
        got = self.cur.fetchone()
        self.conn.commit()
        return tuple(int(x) for x in got)

    def extra(self, rows):
        return {}

    def close(self):
        self.cur.execute('DROP TABLE IF EXISTS floor_state')
        self.conn.commit()
        self.conn.close()


class SQLite:
    """The sqlite3 module in WAL mode with ``--synchronous``; reads through
    a second connection, as a storage's load connection would."""

    def __init__(self, args):
        import sqlite3
        self.sqlite3 = sqlite3
        self.path = os.path.join(args.data_dir, 'floor.sqlite3')
        self.synchronous = args.synchronous
        self.conn = self.reader = None
        self.info = {'driver': 'sqlite3 ' + sqlite3.sqlite_version,
                     'synchronous': args.synchronous}

    def reset(self):
        self.close()
        for suffix in ('', '-wal', '-shm'):
            if os.path.exists(self.path + suffix):
                os.remove(self.path + suffix)
        self.conn = self.sqlite3.connect(self.path, isolation_level=None)
        self.conn.execute('PRAGMA journal_mode = wal')
        self.conn.execute(f'PRAGMA synchronous = {self.synchronous}')
        self.conn.execute('CREATE TABLE floor_state (zoid INTEGER PRIMARY '
                          'KEY, tid INTEGER NOT NULL, state BLOB NOT NULL)')

    def _in_transaction(self, statement, batch):
        self.conn.execute('BEGIN IMMEDIATE')
        self.conn.executemany(statement, batch)
        self.conn.execute('COMMIT')

    def insert(self, rows):
        self._in_transaction('INSERT INTO floor_state (zoid, tid, state) '
                             'VALUES (?, 1, ?)', rows)

    def update(self, rows):
        self._in_transaction('UPDATE floor_state SET state = ?, tid = 2 '
                             'WHERE zoid = ?',
                             [(state, oid) for oid, state in rows])

    def select(self, oid):
        if self.reader is None:
            self.reader = self.sqlite3.connect(self.path,
                                               isolation_level=None)
            self.reader.execute('BEGIN')
        return self.reader.execute(
            'SELECT state, tid FROM floor_state WHERE zoid = ?',
            (oid,)).fetchone()

    def end_read(self):
        self.reader.execute('COMMIT')
        self.reader.close()
        self.reader = None

    def small_commit(self, tid):
        self.conn.execute('BEGIN IMMEDIATE')
        self.conn.execute('UPDATE floor_state SET tid = ? WHERE zoid = 1',
                          (tid,))
        self.conn.execute('COMMIT')

    def totals(self):
        return tuple(self.conn.execute(
            'SELECT COUNT(*), COALESCE(SUM(LENGTH(state)), 0) '
            'FROM floor_state').fetchone())

    def extra(self, rows):
        return {}

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


DATABASES = {'postgresql': PostgreSQL, 'mysql': MariaDB, 'sqlite': SQLite}


def measure(db, args):
    trips = RoundTrips(args.relay_control)
    size = max(1, int(round(args.size)))
    rows = floor_rows(args.objects, size, 'v0')
    sizes = split(args.objects)

    def check(expected):
        got = db.totals()
        if got != (expected, expected * size):
            raise AssertionError(f'floor table holds {got}, expected '
                                 f'{expected} rows of {size} bytes')

    phases = {}
    db.reset()
    done = 0
    for name, _, per_txn in TREES:
        part = rows[done:done + sizes[name]]
        mark = trips.mark()
        start = perf()
        for first in range(0, len(part), per_txn):
            db.insert(part[first:first + per_txn])
        seconds = perf() - start
        phases[f'add_{per_txn}'] = trips.record(
            {'seconds': seconds, 'objects': len(part),
             'rate': len(part) / seconds}, mark, object=len(part),
            commit=-(-len(part) // per_txn))
        done += len(part)
    check(len(rows))

    new = floor_rows(args.objects, size, 'v1')
    mark = trips.mark()
    start = perf()
    for first in range(0, len(new), 1000):
        db.update(new[first:first + 1000])
    seconds = perf() - start
    phases['update_1000'] = trips.record(
        {'seconds': seconds, 'objects': len(new),
         'rate': len(new) / seconds}, mark, object=len(new),
        commit=-(-len(new) // 1000))
    check(len(new))

    expected = dict(new)
    runs, samples = [], []
    mark = trips.mark()
    for _ in range(args.repeat):
        start = perf()
        for oid in range(1, len(new) + 1):
            before = perf()
            state, tid = db.select(oid)
            samples.append(perf() - before)
            if bytes(state) != expected[oid] or tid != 2:
                raise AssertionError(f'floor row {oid} read back wrong')
        db.end_read()
        runs.append(perf() - start)
    seconds = statistics.median(runs)
    # Each pass ends with a COMMIT, counted with its SELECTs.
    phases['cold_read'] = trips.record(
        {'seconds': seconds, 'objects': len(new), 'rate': len(new) / seconds,
         'runs': runs, 'select': percentiles(samples)}, mark,
        select=len(samples))

    samples = []
    mark = trips.mark()
    for i in range(args.latency_commits):
        start = perf()
        db.small_commit(i + 3)
        samples.append(perf() - start)
    phases['commit_latency'] = trips.record(percentiles(samples), mark,
                                            commit=len(samples))
    phases.update(db.extra(rows))
    db.close()
    return {'phases': phases, 'row_size': size, **db.info}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('database', choices=sorted(DATABASES))
    parser.add_argument('--out', required=True)
    parser.add_argument('--objects', type=int, required=True)
    parser.add_argument('--size', type=float, required=True)
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--latency-commits', type=int, default=300)
    parser.add_argument('--dsn', help='PostgreSQL: a libpq string')
    parser.add_argument('--host', default='127.0.0.1', help='MariaDB')
    parser.add_argument('--port', type=int, default=3306, help='MariaDB')
    parser.add_argument('--user', default='root', help='MariaDB')
    parser.add_argument('--passwd', default='', help='MariaDB')
    parser.add_argument('--db', help='MariaDB: the database')
    parser.add_argument('--data-dir', help='SQLite')
    parser.add_argument('--synchronous', default='full', help='SQLite')
    parser.add_argument('--relay-control', metavar='HOST:PORT',
                        help="the relay's control channel: record each "
                        "phase's round trips (roundtrips.py)")
    args = parser.parse_args(argv)
    result = measure(DATABASES[args.database](args), args)
    with open(args.out, 'w') as f:
        json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
