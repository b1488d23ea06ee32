#!/usr/bin/env python3
"""Floor measurements for blobs stored *in* the database, in chunks.

What it measures
----------------
How fast one blob moves between a file on the client and a SQL database,
and how much client memory that takes, for each candidate layout and
transfer method, using only the bare DB-API drivers (no RelStorage code):

PostgreSQL, with psycopg2 and with psycopg 3
    * large objects, one per blob, written and read in pieces through the
      server functions ``lo_put``/``lo_get``, and through psycopg2's
      ``connection.lobject()``;
    * a chunk table ``blob_chunk (blob_id, chunk_num, data bytea)`` with
      ``STORAGE EXTERNAL`` (no TOAST compression), written with one INSERT
      per chunk or one ``COPY ... FROM STDIN (FORMAT binary)`` per blob, read
      with one SELECT per chunk or one ``COPY (SELECT ...) TO STDOUT (FORMAT
      binary)`` per blob, both parsed/built incrementally; again with 4 MiB
      chunks for blobs larger than 4 MiB; and once with the default EXTENDED
      storage (what the compression attempt costs on random data);
    * the server-side cost of deleting a big blob in either layout, and
      what the space does without and with VACUUM.
    Each PostgreSQL write measurement starts after an (untimed) CHECKPOINT.
MariaDB/MySQL, with mysqlclient and with PyMySQL
    * a ``LONGBLOB`` chunk table written with the chunk as a driver
      parameter, as a hex literal ``X'...'``, or (mysqlclient) as a
      hand-built ``_binary'...'`` literal from ``escape_string``; read with
      one SELECT per chunk, one SELECT per 4 or 8 chunks (``BETWEEN``), or
      one streamed SELECT on an unbuffered ``SSCursor``;
    * which chunk sizes each upload method gets past ``max_allowed_packet``.
SQLite (stdlib sqlite3, WAL, synchronous=FULL)
    * the same chunk table, one INSERT per chunk; read by iterating a cursor.
Shared blob directory, for comparison
    * ``shutil.copyfile`` (with and without fsync) and ``os.rename`` on the
      same filesystem.

Each blob is random data (``os.urandom``) in a temporary file.  Uploads read
that file chunk by chunk; downloads write into a new file.  A write is timed
from the first read of the source file to the end of COMMIT; a read from the
first query until the output file is closed.  The table shows, per blob
size, the median throughput of ``--repeat`` runs in MiB/s and the largest
growth of the process's resident set size seen in those runs (sampled every
2 ms by a thread, from a baseline taken right after ``malloc_trim(0)``), so
a method that holds the whole blob in memory stands out.  Every written
blob is read back once (untimed) and compared with its source file; each
read method first runs once untimed (checked against the source, and
warming the server's cache so all read methods start alike).

The script creates its own databases (``blobfloor_<random hex>``) and a
temporary directory, and removes them at the end, also after an error or
Ctrl-C.  It prints the environment (as every benchmark does), the table
and the notes on deletion and packet sizes, and writes them to
``benchmarks/results/blob_floor.json`` (``--json``).  The measurements
live in ``blobfloor/``: ``runner.py`` (timing, memory, the table),
``postgresql.py``, ``mariadb.py`` and ``local.py`` (SQLite, files).

How to run
----------
From the checkout::

    .venv/bin/python benchmarks/blob_floor.py                  # full run
    .venv/bin/python benchmarks/blob_floor.py --sizes 10K,1M --repeat 1
    .venv/bin/python benchmarks/blob_floor.py --only pg,files

Sizes take K/M/G suffixes meaning KiB/MiB/GiB.  The PostgreSQL role (see
``--pg-dsn``) must be allowed to CREATE DATABASE, and to VACUUM
``pg_largeobject`` (superuser) for the delete section; the MariaDB user
(``--mysql-*``; ``--mysql-password`` is ``--mysql-passwd`` of the other
benchmarks) must be allowed to CREATE DATABASE.  With the defaults
(10K,1M,100M, --repeat 3) a full run takes about 2.5 minutes on a small
machine with both servers local.
"""
import shutil
import signal
import sqlite3
import sys
import tempfile
import time

from harness.cli import Parser
from harness.environment import environment, finish
from harness.report import heading, log, show, write_results

from blobfloor.local import FilesBench, SqliteBench
from blobfloor.mariadb import MysqlBench
from blobfloor.postgresql import PostgresBench
from blobfloor.runner import MiB, Runner, parse_size, size_label

PARTS = ('pg', 'mariadb', 'sqlite', 'files')


def parse_args(argv=None):
    parser = Parser(__doc__.split('\n\n')[0])
    parser.add_argument('--sizes', default='10K,1M,100M',
                        type=lambda s: [parse_size(x) for x in s.split(',')
                                        if x.strip()],
                        help='blob sizes, comma separated, K/M/G = '
                        'KiB/MiB/GiB (default: 10K,1M,100M)')
    parser.repeat(3, help='runs per measurement; the median is shown '
                  '(default: 3)')
    parser.add_argument('--chunk-size', type=parse_size, default=MiB,
                        help='chunk (and large-object piece) size '
                        '(default: 1M)')
    parser.add_argument('--big-chunk-size', type=parse_size, default=4 * MiB,
                        help='second chunk size, tried for blobs larger '
                        'than it (default: 4M)')
    parser.choice('only', PARTS, what='--only entry',
                  help='comma separated subset of pg,mariadb,sqlite,files')
    parser.servers(sqlite_synchronous=False)
    parser.add_argument('--tmpdir', default=None,
                        help='where the temporary files and the SQLite '
                        'database go')
    parser.results('blob_floor.json', keep_data=False)
    args = parser.parse(argv)
    args.sizes = sorted(set(args.sizes))
    return args


def _terminate(signum, frame):
    raise SystemExit(128 + signum)  # so the finally blocks drop the databases


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix='blobfloor_', dir=args.tmpdir)
    runner = Runner(args, workdir)
    info, extra, servers = [], [], {}
    pg = PostgresBench(args, runner) if 'pg' in args.only else None
    my = MysqlBench(args, runner) if 'mariadb' in args.only else None
    for bench, backend in ((pg, 'postgresql'), (my, 'mysql')):
        if bench:
            servers[backend] = bench.database.server_version()
    if 'sqlite' in args.only:
        servers['sqlite'] = sqlite3.sqlite_version
    env = environment(servers)
    try:
        for size in args.sizes:
            runner.source(size)
        if pg:
            log('PostgreSQL ...')
            info += pg.run()
            extra += [''] + pg.render_delete()
        if my:
            log('MariaDB ...')
            info += my.run()
            extra += [''] + my.render_probe()
        if 'sqlite' in args.only:
            log('SQLite ...')
            info += SqliteBench(args, runner).run()
        if 'files' in args.only:
            log('files ...')
            info += FilesBench(args, runner).run()
    finally:
        errors = []
        for cleanup in ((pg.drop_dbs if pg else None),
                        (my.drop_db if my else None),
                        lambda: shutil.rmtree(workdir, ignore_errors=True)):
            if cleanup is None:
                continue
            try:
                cleanup()
            except Exception as e:  # noqa: BLE001 - keep cleaning up
                errors.append(e)
                log(f'cleanup failed: {e}')

    lines = heading(finish(env)) + [
        'blob_floor: sizes %s, chunk %s (and %s for larger blobs), median '
        'of %d runs' % (','.join(size_label(s) for s in args.sizes),
                        size_label(args.chunk_size),
                        size_label(args.big_chunk_size), args.repeat),
        'Python %s' % sys.version.split()[0]] + info + [
        'MiB/s = blob size / time (write: read source file + upload + '
        'COMMIT; read: download into a new file);',
        'dRSS = largest growth of the resident set size during one run.', '',
        runner.table.render()] + extra + [
        '', 'total time %.0f s' % (time.perf_counter() - started)]
    show(lines)
    write_results(args.json, {
        'environment': env,
        'settings': {'sizes': args.sizes, 'repeat': args.repeat,
                     'chunk_size': args.chunk_size,
                     'big_chunk_size': args.big_chunk_size,
                     'only': args.only},
        'results': [{'key': list(key), 'cells': {
            str(size): {'mib_s': rate, 'rss_growth_bytes': growth}
            for size, (rate, growth) in cells.items()}}
            for key, cells in runner.table.rows.items()],
        'elapsed_seconds': time.perf_counter() - started,
        'report': '\n'.join(lines)})
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
