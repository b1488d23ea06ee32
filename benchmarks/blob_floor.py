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
Ctrl-C.

How to run
----------
From the checkout::

    .venv/bin/python benchmarks/blob_floor.py                  # full run
    .venv/bin/python benchmarks/blob_floor.py --sizes 10K,1M --repeat 1
    .venv/bin/python benchmarks/blob_floor.py --only pg,files

Sizes take K/M/G suffixes meaning KiB/MiB/GiB.  The PostgreSQL role (see
``--pg-dsn``) must be allowed to CREATE DATABASE, and to VACUUM
``pg_largeobject`` (superuser) for the delete section; the MariaDB user
(``--mysql-*``) must be allowed to CREATE DATABASE.  With the defaults
(10K,1M,100M, --repeat 3) a full run takes about 2.5 minutes on a small
machine with both servers local.
"""
import argparse
import binascii
import ctypes
import ctypes.util
import filecmp
import itertools
import math
import os
import secrets
import shutil
import signal
import sqlite3
import statistics
import struct
import sys
import tempfile
import threading
import time

KiB = 1024
MiB = 1024 * KiB

# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------


def parse_size(text):
    """'10K' -> 10240, '1M' -> 1048576, '1.5G', '4096' (suffixes are binary)."""
    text = text.strip().upper()
    for suffix in ('IB', 'B'):
        if text.endswith(suffix) and len(text) > len(suffix):
            text = text[:-len(suffix)]
            break
    factor = {'K': KiB, 'M': MiB, 'G': 1024 * MiB}.get(text[-1:], 1)
    if factor != 1:
        text = text[:-1]
    return int(float(text) * factor)


def size_label(nbytes):
    for unit, factor in (('G', 1024 * MiB), ('M', MiB), ('K', KiB)):
        if nbytes >= factor and nbytes % factor == 0:
            return '%d%s' % (nbytes // factor, unit)
    return str(nbytes)


def file_chunks(f, chunk_size):
    """Yield the contents of the open binary file f in pieces of chunk_size."""
    while True:
        data = f.read(chunk_size)
        if not data:
            return
        yield data


def chunk_count(size, chunk_size):
    return max(1, math.ceil(size / chunk_size))


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Memory: peak resident set size growth during one operation
# ---------------------------------------------------------------------------

_PAGE = os.sysconf('SC_PAGE_SIZE')
_libc_name = ctypes.util.find_library('c')
_libc = ctypes.CDLL(_libc_name) if _libc_name else None
_malloc_trim = getattr(_libc, 'malloc_trim', None)


def _rss(fd):
    # /proc/self/statm: size resident shared text lib data dt (in pages)
    return int(os.pread(fd, 128, 0).split()[1]) * _PAGE


class PeakRss:
    """Context manager: ``growth`` is the peak RSS during the block minus
    the RSS at its start, sampled by a background thread."""

    interval = 0.002

    def __enter__(self):
        if _malloc_trim is not None:
            _malloc_trim(0)  # give freed heap back, so growth is visible
        self._fd = os.open('/proc/self/statm', os.O_RDONLY)
        self.start = self.peak = _rss(self._fd)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, _rss(self._fd))

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss(self._fd))
        os.close(self._fd)
        self.growth = self.peak - self.start


# ---------------------------------------------------------------------------
# PostgreSQL binary COPY format, produced and parsed incrementally
# ---------------------------------------------------------------------------

COPY_SIGNATURE = b'PGCOPY\n\xff\r\n\x00'
COPY_HEADER = COPY_SIGNATURE + struct.pack('!ii', 0, 0)  # flags, ext. length
COPY_TRAILER = struct.pack('!h', -1)
# One blob_chunk row: 3 fields; int8 blob_id; int4 chunk_num; bytea length
# (the bytea bytes follow).
COPY_ROW_PREFIX = struct.Struct('!hiqiii')


def copy_in_pieces(f, blob_id, chunk_size):
    """Yield the binary COPY stream for (blob_id, chunk_num, data) rows made
    from the file f, one chunk at a time."""
    yield COPY_HEADER
    for num, data in enumerate(file_chunks(f, chunk_size)):
        yield COPY_ROW_PREFIX.pack(3, 8, blob_id, 4, num, len(data))
        yield data
    yield COPY_TRAILER


class CopyInFile:
    """Read-only file-like object over an iterable of byte strings, for
    psycopg2's ``cursor.copy_expert()`` (which calls ``read(size)``)."""

    def __init__(self, pieces):
        self._pieces = iter(pieces)
        self._piece = b''
        self._pos = 0

    def read(self, size=-1):
        while self._pos >= len(self._piece):
            self._piece = next(self._pieces, None)
            self._pos = 0
            if self._piece is None:
                self._piece = b''
                return b''
        if self._pos == 0 and (size < 0 or size >= len(self._piece)):
            self._pos = len(self._piece)
            return self._piece  # the common case: no copy
        end = len(self._piece) if size < 0 else self._pos + size
        out = self._piece[self._pos:end]
        self._pos += len(out)
        return out


class CopyOutWriter:
    """Write-only file-like object parsing a binary COPY stream of a single
    bytea column as it arrives; passes only the column's bytes on to ``out``.
    Holds at most one row header, never a whole row."""

    def __init__(self, out):
        self.out = out
        self.done = False
        self.nbytes = 0
        self._state = 'header'
        self._need = len(COPY_HEADER)  # size of the next fixed-size item
        self._item = bytearray()       # that item, while incomplete
        self._left = 0                 # column bytes still to pass through

    def write(self, block):
        view = memoryview(block)
        pos, end = 0, len(view)
        while pos < end:
            if self.done:
                raise ValueError('data after the COPY trailer')
            if self._left:
                n = min(self._left, end - pos)
                self.out.write(view[pos:pos + n])
                self.nbytes += n
                self._left -= n
                pos += n
                continue
            n = min(self._need - len(self._item), end - pos)
            self._item += view[pos:pos + n]
            pos += n
            if len(self._item) == self._need:
                self._on_item(bytes(self._item))
                self._item.clear()
        return len(view)

    def _on_item(self, item):
        if self._state == 'header':
            if not item.startswith(COPY_SIGNATURE):
                raise ValueError('not a binary COPY stream')
            _flags, ext_len = struct.unpack_from('!ii', item, len(COPY_SIGNATURE))
            if ext_len:
                raise ValueError('unexpected COPY header extension')
            self._state, self._need = 'tuple', 2
        elif self._state == 'tuple':
            (nfields,) = struct.unpack('!h', item)
            if nfields == -1:
                self.done = True
            elif nfields != 1:
                raise ValueError('expected 1 field per row, got %d' % nfields)
            else:
                self._state, self._need = 'field', 4
        else:  # 'field': the length of the column value
            (length,) = struct.unpack('!i', item)
            if length < 0:
                raise ValueError('unexpected NULL')
            self._left = length
            self._state, self._need = 'tuple', 2


# ---------------------------------------------------------------------------
# Results table
# ---------------------------------------------------------------------------

class Table:
    def __init__(self, sizes):
        self.sizes = sizes
        self.rows = {}  # key -> {size: (median MiB/s, max RSS growth)}

    def add(self, key, size, rate, growth):
        self.rows.setdefault(key, {})[size] = (rate, growth)

    def render(self):
        heads = ('db', 'driver', 'layout', 'op', 'method', 'chunk')
        texts = []
        for key, cells in self.rows.items():
            line = list(key)
            for size in self.sizes:
                if size in cells:
                    rate, growth = cells[size]
                    line.append('%.0f' % rate if rate >= 100 else '%.1f' % rate)
                    line.append('%.1f' % (growth / MiB))
                else:
                    line += ['-', '-']
            texts.append(line)
        size_heads = []
        for size in self.sizes:
            size_heads += [size_label(size) + ' MiB/s', 'dRSS MiB']
        all_heads = list(heads) + size_heads
        widths = [max(len(str(r[i])) for r in texts + [all_heads])
                  for i in range(len(all_heads))]
        left = len(heads)

        def fmt(cols):
            return '  '.join(
                str(c).ljust(w) if i < left else str(c).rjust(w)
                for i, (c, w) in enumerate(zip(cols, widths)))
        out = [fmt(all_heads), '-' * len(fmt(all_heads))]
        previous = None
        for line in texts:
            if previous is not None and line[0] != previous:
                out.append('')
            previous = line[0]
            out.append(fmt(line))
        return '\n'.join(out)


# ---------------------------------------------------------------------------
# Measurement harness
# ---------------------------------------------------------------------------

class Runner:
    """Times write and read functions over all sizes and fills the table.

    A write function is ``fn(blob_id, src_file, chunk_size) -> ref``; it must
    COMMIT.  A read function is ``fn(ref, out_file, size, chunk_size)``.
    ``ref`` is whatever identifies the stored blob (blob_id or an oid).
    """

    def __init__(self, args, workdir):
        self.sizes = args.sizes
        self.repeat = args.repeat
        self.workdir = workdir
        self.table = Table(args.sizes)
        self._ids = itertools.count(1)
        self._sources = {}
        self._outputs = itertools.count()
        # Called (untimed) before the runs of each write measurement.
        self.before_write = None

    def source(self, size):
        """Path of a file of `size` random bytes (made once per size)."""
        if size not in self._sources:
            path = os.path.join(self.workdir, 'source-%d' % size)
            with open(path, 'wb') as f:
                left = size
                while left:
                    n = min(left, MiB)
                    f.write(os.urandom(n))
                    left -= n
            self._sources[size] = path
        return self._sources[size]

    def new_blob_id(self):
        return next(self._ids)

    def out_path(self):
        return os.path.join(self.workdir, 'out-%d' % next(self._outputs))

    def _record(self, key, size, times, growths):
        rate = size / MiB / statistics.median(times)
        self.table.add(key, size, rate, max(growths))
        log('  %-60s %6s %9.1f MiB/s  dRSS %6.1f MiB' % (
            ' / '.join(key), size_label(size), rate, max(growths) / MiB))

    def write(self, key, fn, chunk_size, verify, sizes=None):
        """Measure a write method; returns {size: ref of the last blob}."""
        refs = {}
        for size in sizes or self.sizes:
            src = self.source(size)
            if self.before_write:
                self.before_write()
            times, growths = [], []
            for _ in range(self.repeat):
                blob_id = self.new_blob_id()
                with PeakRss() as rss, open(src, 'rb') as f:
                    start = time.perf_counter()
                    ref = fn(blob_id, f, chunk_size)
                    times.append(time.perf_counter() - start)
                growths.append(rss.growth)
            self._record(key, size, times, growths)
            # Untimed check: the last blob, read back, equals its source.
            out = self.out_path()
            with open(out, 'wb') as f:
                verify(ref, f, size, chunk_size)
            self._check(out, src, key, 'written')
            refs[size] = ref
        return refs

    def read(self, key, fn, chunk_size, refs):
        """Measure a read method on the blobs in refs ({size: ref}).  One
        untimed run first checks the result and warms the server's cache,
        so every read method starts from the same cache state."""
        for size in self.sizes:
            if size not in refs:
                continue
            out = self.out_path()
            with open(out, 'wb') as f:
                fn(refs[size], f, size, chunk_size)
            self._check(out, self.source(size), key, 'read')
            times, growths = [], []
            for _ in range(self.repeat):
                out = self.out_path()
                with PeakRss() as rss:
                    start = time.perf_counter()
                    with open(out, 'wb') as f:
                        fn(refs[size], f, size, chunk_size)
                    times.append(time.perf_counter() - start)
                growths.append(rss.growth)
                os.unlink(out)
            self._record(key, size, times, growths)

    def timed(self, key, fn, prepare=None):
        """Measure a plain file operation fn(size, src_path) over all sizes;
        prepare(size, src_path), if given, runs untimed before each run."""
        for size in self.sizes:
            src = self.source(size)
            times, growths = [], []
            for _ in range(self.repeat):
                if prepare:
                    prepare(size, src)
                with PeakRss() as rss:
                    start = time.perf_counter()
                    fn(size, src)
                    times.append(time.perf_counter() - start)
                growths.append(rss.growth)
            self._record(key, size, times, growths)

    @staticmethod
    def _check(out, src, key, what):
        same = filecmp.cmp(out, src, shallow=False)
        os.unlink(out)
        if not same:
            raise AssertionError('%s: blob %s differs from its source'
                                 % (' / '.join(key), what))


# ---------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------

PG_TABLE_DDL = """
CREATE TABLE {table} (
    blob_id BIGINT,
    chunk_num INT,
    data BYTEA NOT NULL,
    PRIMARY KEY (blob_id, chunk_num)
)"""


def pg_insert_sql(table):
    return ('INSERT INTO %s (blob_id, chunk_num, data) VALUES (%%s, %%s, %%s)'
            % table)


def pg_select_sql(table):
    return ('SELECT data FROM %s WHERE blob_id = %%s AND chunk_num = %%s'
            % table)


def pg_copy_in_sql(table):
    return ('COPY %s (blob_id, chunk_num, data) FROM STDIN WITH (FORMAT binary)'
            % table)


def pg_copy_out_sql(table, blob_id):
    return ('COPY (SELECT data FROM %s WHERE blob_id = %d ORDER BY chunk_num)'
            ' TO STDOUT WITH (FORMAT binary)' % (table, int(blob_id)))


class Psycopg2Methods:
    """psycopg2: parameters are interpolated client-side (bytea as a hex
    literal) and results arrive as text (bytea hex-decoded by the driver)."""

    driver = 'psycopg2'

    def __init__(self, conn):
        self.conn = conn

    # -- large objects --
    def write_lo_put(self, blob_id, f, chunk_size):
        cur = self.conn.cursor()
        cur.execute('SELECT lo_create(0)')
        (oid,) = cur.fetchone()
        offset = 0
        for data in file_chunks(f, chunk_size):
            cur.execute('SELECT lo_put(%s::oid, %s, %s)', (oid, offset, data))
            offset += len(data)
        self.conn.commit()
        return oid

    def read_lo_get(self, oid, out, size, chunk_size):
        cur = self.conn.cursor()
        for offset in range(0, size, chunk_size):
            cur.execute('SELECT lo_get(%s::oid, %s, %s)',
                        (oid, offset, chunk_size))
            out.write(cur.fetchone()[0])
        self.conn.commit()

    def write_lobject(self, blob_id, f, chunk_size):
        lobj = self.conn.lobject(0, 'wb')
        for data in file_chunks(f, chunk_size):
            lobj.write(data)
        oid = lobj.oid
        lobj.close()
        self.conn.commit()
        return oid

    def read_lobject(self, oid, out, size, chunk_size):
        lobj = self.conn.lobject(oid, 'rb')
        while True:
            data = lobj.read(chunk_size)
            if not data:
                break
            out.write(data)
        lobj.close()
        self.conn.commit()

    # -- chunk table --
    def write_insert(self, table):
        sql = pg_insert_sql(table)

        def write(blob_id, f, chunk_size):
            cur = self.conn.cursor()
            for num, data in enumerate(file_chunks(f, chunk_size)):
                cur.execute(sql, (blob_id, num, data))
            self.conn.commit()
            return blob_id
        return write

    def write_copy(self, table):
        sql = pg_copy_in_sql(table)

        def write(blob_id, f, chunk_size):
            cur = self.conn.cursor()
            stream = CopyInFile(copy_in_pieces(f, blob_id, chunk_size))
            cur.copy_expert(sql, stream, size=chunk_size + 64)
            self.conn.commit()
            return blob_id
        return write

    def read_select(self, table):
        sql = pg_select_sql(table)

        def read(blob_id, out, size, chunk_size):
            cur = self.conn.cursor()
            for num in range(chunk_count(size, chunk_size)):
                cur.execute(sql, (blob_id, num))
                out.write(cur.fetchone()[0])
            self.conn.commit()
        return read

    def read_copy(self, table):
        def read(blob_id, out, size, chunk_size):
            cur = self.conn.cursor()
            parser = CopyOutWriter(out)
            cur.copy_expert(pg_copy_out_sql(table, blob_id), parser)
            assert parser.done and parser.nbytes == size
            self.conn.commit()
        return read


class Psycopg3Methods:
    """psycopg 3: server-side parameters (bytes sent binary); results as
    text unless ``binary=True``."""

    driver = 'psycopg3'

    def __init__(self, conn):
        self.conn = conn

    # -- large objects --
    def write_lo_put(self, blob_id, f, chunk_size):
        cur = self.conn.cursor()
        cur.execute('SELECT lo_create(0)')
        (oid,) = cur.fetchone()
        offset = 0
        for data in file_chunks(f, chunk_size):
            cur.execute('SELECT lo_put(%s::oid, %s::bigint, %s)',
                        (oid, offset, data))
            offset += len(data)
        self.conn.commit()
        return oid

    def read_lo_get(self, oid, out, size, chunk_size):
        cur = self.conn.cursor()
        for offset in range(0, size, chunk_size):
            cur.execute('SELECT lo_get(%s::oid, %s::bigint, %s::int)',
                        (oid, offset, chunk_size), binary=True)
            out.write(cur.fetchone()[0])
        self.conn.commit()

    # -- chunk table --
    def write_insert(self, table):
        sql = pg_insert_sql(table)

        def write(blob_id, f, chunk_size):
            cur = self.conn.cursor()
            for num, data in enumerate(file_chunks(f, chunk_size)):
                cur.execute(sql, (blob_id, num, data))
            self.conn.commit()
            return blob_id
        return write

    def write_copy(self, table):
        sql = pg_copy_in_sql(table)

        def write(blob_id, f, chunk_size):
            cur = self.conn.cursor()
            with cur.copy(sql) as copy:
                for piece in copy_in_pieces(f, blob_id, chunk_size):
                    copy.write(piece)
            self.conn.commit()
            return blob_id
        return write

    def read_select(self, table, binary=True):
        sql = pg_select_sql(table)

        def read(blob_id, out, size, chunk_size):
            cur = self.conn.cursor()
            for num in range(chunk_count(size, chunk_size)):
                cur.execute(sql, (blob_id, num), binary=binary)
                out.write(cur.fetchone()[0])
            self.conn.commit()
        return read

    def read_copy(self, table):
        def read(blob_id, out, size, chunk_size):
            cur = self.conn.cursor()
            parser = CopyOutWriter(out)
            with cur.copy(pg_copy_out_sql(table, blob_id)) as copy:
                for block in copy:
                    parser.write(block)
            assert parser.done and parser.nbytes == size
            self.conn.commit()
        return read


class PostgresBench:
    def __init__(self, args, runner):
        self.args = args
        self.runner = runner
        self.dbname = 'blobfloor_' + secrets.token_hex(4)
        self.created = []

    # -- database lifecycle --
    def _admin(self):
        import psycopg2
        conn = psycopg2.connect(self.args.pg_dsn)
        conn.autocommit = True
        return conn

    def create_db(self, name):
        conn = self._admin()
        try:
            conn.cursor().execute('CREATE DATABASE %s' % name)
            self.created.append(name)
        finally:
            conn.close()

    def drop_dbs(self):
        while self.created:
            name = self.created.pop()
            conn = self._admin()
            try:
                conn.cursor().execute(
                    'DROP DATABASE IF EXISTS %s WITH (FORCE)' % name)
            finally:
                conn.close()

    def connect2(self, dbname):
        import psycopg2
        return psycopg2.connect(self.args.pg_dsn, dbname=dbname)

    def connect3(self, dbname):
        import psycopg
        return psycopg.connect(self.args.pg_dsn, dbname=dbname)

    # -- the measurements --
    def settings(self, conn):
        cur = conn.cursor()
        cur.execute('SELECT version()')
        lines = [cur.fetchone()[0].split(' on ')[0]]
        names = ('shared_buffers', 'max_wal_size', 'synchronous_commit',
                 'fsync', 'full_page_writes', 'wal_compression',
                 'default_toast_compression')
        values = []
        for name in names:
            cur.execute('SHOW %s' % name)
            values.append('%s=%s' % (name, cur.fetchone()[0]))
        lines.append(' '.join(values))
        conn.rollback()
        return lines

    def run(self):
        import psycopg
        import psycopg2
        self.create_db(self.dbname)
        conn2 = self.connect2(self.dbname)
        conn3 = self.connect3(self.dbname)
        try:
            cur = conn2.cursor()
            for table, storage in (('blob_chunk', 'EXTERNAL'),
                                   ('blob_chunk_ext', None)):
                cur.execute(PG_TABLE_DDL.format(table=table))
                if storage:
                    cur.execute('ALTER TABLE %s ALTER COLUMN data SET STORAGE %s'
                                % (table, storage))
            conn2.commit()
            info = self.settings(conn2) + [
                'psycopg2 %s, psycopg %s (libpq wrapper: %s)' % (
                    psycopg2.__version__.split()[0], psycopg.__version__,
                    psycopg.pq.__impl__)]
            # Start each write measurement without a checkpoint in progress
            # (300 MB of WAL per row against max_wal_size would otherwise
            # make the rows depend on their neighbours).
            checkpoints = self.connect2(self.dbname)
            checkpoints.autocommit = True
            self.runner.before_write = lambda: checkpoints.cursor().execute('CHECKPOINT')
            try:
                self._measure(Psycopg2Methods(conn2), Psycopg3Methods(conn3))
            finally:
                self.runner.before_write = None
                checkpoints.close()
        finally:
            conn2.close()
            conn3.close()
        self.delete_costs()
        return info

    def _measure(self, m2, m3):
        r = self.runner
        chunk = self.args.chunk_size
        big = self.args.big_chunk_size
        big_sizes = [s for s in r.sizes if s > big]
        # Untimed read-back used to check every write (psycopg 3, binary).
        verify_lo = m3.read_lo_get
        verify_ext = m3.read_select('blob_chunk')
        verify_extended = m3.read_select('blob_chunk_ext')
        for m in (m2, m3):
            d = m.driver
            lo = 'large object'
            refs = r.write(('pg', d, lo, 'write', 'lo_put per piece', size_label(chunk)),
                           m.write_lo_put, chunk, verify_lo)
            if d == 'psycopg2':
                refs = r.write(('pg', d, lo, 'write', 'lobject.write', size_label(chunk)),
                               m.write_lobject, chunk, verify_lo)
            r.read(('pg', d, lo, 'read', 'lo_get per piece', size_label(chunk)),
                   m.read_lo_get, chunk, refs)
            if d == 'psycopg2':
                r.read(('pg', d, lo, 'read', 'lobject.read', size_label(chunk)),
                       m.read_lobject, chunk, refs)

            layout = 'bytea EXTERNAL'
            for csize, sizes in ((chunk, None), (big, big_sizes)):
                if sizes == []:
                    continue
                label = size_label(csize)
                refs = r.write(('pg', d, layout, 'write', 'INSERT per chunk', label),
                               m.write_insert('blob_chunk'), csize, verify_ext, sizes)
                refs = r.write(('pg', d, layout, 'write', 'COPY FROM binary', label),
                               m.write_copy('blob_chunk'), csize, verify_ext, sizes)
                r.read(('pg', d, layout, 'read', 'SELECT per chunk', label),
                       m.read_select('blob_chunk'), csize, refs)
                if d == 'psycopg3':
                    r.read(('pg', d, layout, 'read', 'SELECT per chunk (text)', label),
                           m.read_select('blob_chunk', binary=False), csize, refs)
                r.read(('pg', d, layout, 'read', 'COPY TO binary', label),
                       m.read_copy('blob_chunk'), csize, refs)

        layout = 'bytea EXTENDED'
        d = m3.driver
        refs = r.write(('pg', d, layout, 'write', 'INSERT per chunk', size_label(chunk)),
                       m3.write_insert('blob_chunk_ext'), chunk, verify_extended)
        r.read(('pg', d, layout, 'read', 'SELECT per chunk', size_label(chunk)),
               m3.read_select('blob_chunk_ext'), chunk, refs)

    def delete_costs(self):
        """Delete a blob of the largest size in each layout, in a fresh
        database (so pg_largeobject holds nothing else), and follow the space."""
        size = max(self.runner.sizes)
        chunk = self.args.chunk_size
        dbname = self.dbname + '_del'
        self.create_db(dbname)
        conn = self.connect2(dbname)
        self.delete_report = []
        try:
            m = Psycopg2Methods(conn)
            cur = conn.cursor()
            cur.execute(PG_TABLE_DDL.format(table='blob_del'))
            cur.execute('ALTER TABLE blob_del ALTER COLUMN data SET STORAGE EXTERNAL')
            # Keep autovacuum out of the way of this table.
            cur.execute('ALTER TABLE blob_del SET (autovacuum_enabled = off,'
                        ' toast.autovacuum_enabled = off)')
            conn.commit()

            def total_size(rel):
                cur.execute('SELECT pg_total_relation_size(%s)', (rel,))
                (n,) = cur.fetchone()
                conn.commit()
                return n

            def timed(sql, params=None, autocommit=False):
                conn.autocommit = autocommit
                start = time.perf_counter()
                cur.execute(sql, params)
                if not autocommit:
                    conn.commit()
                elapsed = time.perf_counter() - start
                conn.autocommit = False
                return elapsed

            src = self.runner.source(size)
            write_chunks = m.write_copy('blob_del')

            def store(layout):
                with open(src, 'rb') as f:
                    if layout == 'large object':
                        return m.write_lobject(None, f, chunk)
                    return write_chunks(self.runner.new_blob_id(), f, chunk)

            def delete(layout, ref):
                if layout == 'large object':
                    return timed('SELECT lo_unlink(%s::oid)', (ref,))
                return timed('DELETE FROM blob_del WHERE blob_id = %s', (ref,))

            for layout, rel in (('bytea EXTERNAL', 'blob_del'),
                                ('large object', 'pg_largeobject')):
                empty = total_size(rel)
                ref = store(layout)
                s_written = total_size(rel)
                t_delete = delete(layout, ref)
                s_deleted = total_size(rel)
                ref = store(layout)             # without VACUUM in between
                s_rewritten = total_size(rel)
                t_delete2 = delete(layout, ref)
                t_vacuum = timed('VACUUM %s' % rel, autocommit=True)
                s_vacuumed = total_size(rel)
                store(layout)
                s_after = total_size(rel)
                self.delete_report.append(
                    (layout, size, t_delete, t_delete2, t_vacuum,
                     [x / MiB for x in (empty, s_written, s_deleted, s_rewritten,
                                        s_vacuumed, s_after)]))
                log('  delete %s: %s' % (layout, self.delete_report[-1]))
        finally:
            conn.close()

    def render_delete(self):
        lines = ['PostgreSQL: deleting one %s blob (1 MiB chunks / pieces), server side;'
                 ' relation size in MiB (pg_total_relation_size, incl. TOAST and index)'
                 % size_label(max(self.runner.sizes)),
                 '%-15s %9s %8s %8s %10s %12s %10s %10s %10s' % (
                     'layout', 'delete s', 'empty', 'written', 'deleted',
                     '2nd written', 'VACUUM s', 'vacuumed', '3rd written')]
        for layout, _size, t1, t2, tv, sizes in self.delete_report:
            lines.append('%-15s %9.3f %8.1f %8.1f %10.1f %12.1f %10.3f %10.1f %10.1f' % (
                layout, (t1 + t2) / 2, sizes[0], sizes[1], sizes[2], sizes[3],
                tv, sizes[4], sizes[5]))
        lines.append('(delete = DELETE of the chunk rows or lo_unlink(), plus COMMIT,'
                     ' mean of 2; VACUUM runs after deleting the 2nd blob)')
        return lines


# ---------------------------------------------------------------------------
# MariaDB / MySQL
# ---------------------------------------------------------------------------

MY_TABLE_DDL = """
CREATE TABLE blob_chunk (
    blob_id BIGINT NOT NULL,
    chunk_num INT NOT NULL,
    data LONGBLOB NOT NULL,
    PRIMARY KEY (blob_id, chunk_num)
) ENGINE=InnoDB"""

MY_INSERT = 'INSERT INTO blob_chunk (blob_id, chunk_num, data) VALUES (%s, %s, %s)'
MY_SELECT = 'SELECT data FROM blob_chunk WHERE blob_id = %s AND chunk_num = %s'
MY_SELECT_RANGE = ('SELECT data FROM blob_chunk WHERE blob_id = %s'
                   ' AND chunk_num BETWEEN %s AND %s ORDER BY chunk_num')
MY_SELECT_ALL = 'SELECT data FROM blob_chunk WHERE blob_id = %s ORDER BY chunk_num'


class MysqlMethods:
    """Upload and download methods for one driver module (MySQLdb or pymysql);
    both escape parameters client-side into the statement text."""

    def __init__(self, module, conn):
        self.module = module
        self.conn = conn
        self.driver = 'mysqlclient' if module.__name__ == 'MySQLdb' else 'PyMySQL'
        self.ss_cursor = module.cursors.SSCursor

    def _insert_all(self, blob_id, f, chunk_size, statement):
        cur = self.conn.cursor()
        for num, data in enumerate(file_chunks(f, chunk_size)):
            cur.execute(statement(blob_id, num, data))
        self.conn.commit()
        return blob_id

    def write_param(self, blob_id, f, chunk_size):
        cur = self.conn.cursor()
        for num, data in enumerate(file_chunks(f, chunk_size)):
            cur.execute(MY_INSERT, (blob_id, num, data))
        self.conn.commit()
        return blob_id

    def hex_statement(self, blob_id, num, data):
        prefix = ('INSERT INTO blob_chunk (blob_id, chunk_num, data)'
                  " VALUES (%d, %d, X'" % (blob_id, num))
        if self.driver == 'mysqlclient':   # takes bytes statements
            return b''.join((prefix.encode(), binascii.hexlify(data), b"')"))
        return ''.join((prefix, data.hex(), "')"))

    def binary_statement(self, blob_id, num, data):
        # mysqlclient only: mysql_real_escape_string() on the raw bytes.
        prefix = ('INSERT INTO blob_chunk (blob_id, chunk_num, data)'
                  " VALUES (%d, %d, _binary'" % (blob_id, num))
        return b''.join((prefix.encode(), self.conn.escape_string(data), b"')"))

    def write_hex(self, blob_id, f, chunk_size):
        return self._insert_all(blob_id, f, chunk_size, self.hex_statement)

    def write_binary(self, blob_id, f, chunk_size):
        return self._insert_all(blob_id, f, chunk_size, self.binary_statement)

    def read_select(self, blob_id, out, size, chunk_size):
        cur = self.conn.cursor()
        for num in range(chunk_count(size, chunk_size)):
            cur.execute(MY_SELECT, (blob_id, num))
            out.write(cur.fetchone()[0])
        self.conn.rollback()

    def read_range(self, per_query):
        def read(blob_id, out, size, chunk_size):
            cur = self.conn.cursor()
            for first in range(0, chunk_count(size, chunk_size), per_query):
                cur.execute(MY_SELECT_RANGE, (blob_id, first, first + per_query - 1))
                for (data,) in cur.fetchall():
                    out.write(data)
            self.conn.rollback()
        return read

    def read_stream(self, blob_id, out, size, chunk_size):
        cur = self.conn.cursor(self.ss_cursor)
        cur.execute(MY_SELECT_ALL, (blob_id,))
        for (data,) in cur:
            out.write(data)
        cur.close()
        self.conn.rollback()


class MysqlBench:
    def __init__(self, args, runner):
        self.args = args
        self.runner = runner
        self.dbname = 'blobfloor_' + secrets.token_hex(4)
        self.created = False
        self.probe_lines = []

    def _connect(self, module, dbname=None, charset='utf8mb4'):
        kwargs = dict(host=self.args.mysql_host, port=self.args.mysql_port,
                      user=self.args.mysql_user, charset=charset)
        # The two drivers spell password/database differently.  mysqlclient
        # needs binary_prefix=True to send bytes as _binary'...' (without it
        # they are plain string literals in the connection's charset);
        # PyMySQL 1.1+ always sends bytes as _binary X'<hex>'.
        if module.__name__ == 'MySQLdb':
            kwargs.update(passwd=self.args.mysql_password, binary_prefix=True)
            if dbname:
                kwargs['db'] = dbname
        else:
            kwargs['password'] = self.args.mysql_password
            if dbname:
                kwargs['database'] = dbname
        return module.connect(**kwargs)

    def drop_db(self):
        if self.created:
            import MySQLdb
            conn = self._connect(MySQLdb)
            try:
                conn.cursor().execute('DROP DATABASE IF EXISTS %s' % self.dbname)
            finally:
                conn.close()
            self.created = False

    def run(self):
        import MySQLdb
        import MySQLdb.cursors
        import pymysql
        import pymysql.cursors
        admin = self._connect(MySQLdb)
        try:
            cur = admin.cursor()
            cur.execute('CREATE DATABASE %s' % self.dbname)
            self.created = True
            cur.execute('SELECT VERSION(), @@max_allowed_packet, @@innodb_buffer_pool_size,'
                        ' @@innodb_log_file_size, @@innodb_flush_log_at_trx_commit,'
                        ' @@innodb_doublewrite, @@innodb_flush_method')
            version, packet, pool, logsize, flush, dblwr, method = cur.fetchone()
        finally:
            admin.close()
        self.max_allowed_packet = packet
        info = ['MariaDB/MySQL %s: max_allowed_packet=%s innodb_buffer_pool_size=%s'
                ' innodb_log_file_size=%s innodb_flush_log_at_trx_commit=%s'
                ' innodb_doublewrite=%s innodb_flush_method=%s' % (
                    version, size_label(packet), size_label(pool), size_label(logsize),
                    flush, dblwr, method),
                'mysqlclient %s, PyMySQL %s' % ('.'.join(map(str, MySQLdb.version_info[:3])), pymysql.__version__)]
        conns = [self._connect(MySQLdb, self.dbname), self._connect(pymysql, self.dbname),
                 self._connect(MySQLdb, self.dbname, charset='latin1')]
        try:
            conns[0].cursor().execute(MY_TABLE_DDL)
            conns[0].commit()
            methods = [MysqlMethods(MySQLdb, conns[0]), MysqlMethods(pymysql, conns[1])]
            self._measure(methods, MysqlMethods(MySQLdb, conns[2]))
        finally:
            for conn in conns:
                conn.close()
        self.probe_packet_limits(MySQLdb, pymysql)
        return info

    def _measure(self, methods, latin1):
        # Reads use the blobs of the last write row: with the default 128 MiB
        # buffer pool (O_DIRECT) a 100 MB blob that was pushed out by later
        # writes is read from disk every time (midpoint insertion keeps a
        # big scan from becoming resident), which would swamp the method.
        r = self.runner
        chunk = self.args.chunk_size
        big = self.args.big_chunk_size
        big_sizes = [s for s in r.sizes if s > big]
        verify = methods[0].read_select
        layout = 'LONGBLOB chunks'
        for m in methods:
            d = m.driver
            label = size_label(chunk)
            refs = r.write(('mariadb', d, layout, 'write', 'INSERT, driver param', label),
                           m.write_param, chunk, verify)
            refs = r.write(('mariadb', d, layout, 'write', "INSERT X'hex'", label),
                           m.write_hex, chunk, verify)
            if d == 'mysqlclient':
                refs = r.write(('mariadb', d, layout, 'write', "INSERT _binary'escaped'",
                                label), m.write_binary, chunk, verify)
                # The same with a latin1 connection: escaping and the
                # server's lexer no longer look for utf8mb4 sequences.
                refs = r.write(('mariadb', d, layout, 'write', 'INSERT, param, latin1 conn',
                                label), latin1.write_param, chunk, verify)
            r.read(('mariadb', d, layout, 'read', 'SELECT per chunk', label),
                   m.read_select, chunk, refs)
            for k in (4, 8):
                r.read(('mariadb', d, layout, 'read', 'SELECT %d chunks (BETWEEN)' % k, label),
                       m.read_range(k), chunk, refs)
            r.read(('mariadb', d, layout, 'read', 'SSCursor stream', label),
                   m.read_stream, chunk, refs)
            if big_sizes:
                label = size_label(big)
                refs = r.write(('mariadb', d, layout, 'write', 'INSERT, driver param', label),
                               m.write_param, big, verify, big_sizes)
                r.read(('mariadb', d, layout, 'read', 'SELECT per chunk', label),
                       m.read_select, big, refs)
                r.read(('mariadb', d, layout, 'read', 'SSCursor stream', label),
                       m.read_stream, big, refs)

    def probe_packet_limits(self, MySQLdb, pymysql):
        """Try one INSERT of a single chunk of various sizes per method."""
        packet = self.max_allowed_packet
        sizes = [(packet // 2 - KiB, 'P/2-1K'), (packet // 2 + KiB, 'P/2+1K'),
                 (packet - 512 * KiB, 'P-512K'), (packet - 64 * KiB, 'P-64K')]
        cases = [
            (MySQLdb, 'driver param', 'random'),
            (MySQLdb, 'driver param', 'zeros'),
            (MySQLdb, "X'hex'", 'random'),
            (MySQLdb, "_binary'escaped'", 'random'),
            (pymysql, 'driver param', 'random'),
            (pymysql, "X'hex'", 'random'),
        ]
        self.probe_sizes = sizes
        biggest = max(size for size, label in sizes)
        data_of = {'random': os.urandom(biggest), 'zeros': bytes(biggest)}
        for module, method, kind in cases:
            results = []
            for size, _label in sizes:
                data = data_of[kind][:size]
                conn = self._connect(module, self.dbname)
                m = MysqlMethods(module, conn)
                try:
                    cur = conn.cursor()
                    if method == 'driver param':
                        cur.execute(MY_INSERT, (10 ** 9, 0, data))
                    elif method == "X'hex'":
                        cur.execute(m.hex_statement(10 ** 9, 0, data))
                    else:
                        cur.execute(m.binary_statement(10 ** 9, 0, data))
                    conn.rollback()
                    results.append('ok')
                except Exception as e:  # noqa: BLE001 - we report it
                    code = e.args[0] if e.args and isinstance(e.args[0], int) else ''
                    results.append('FAIL %s' % (code or type(e).__name__))
                finally:
                    try:
                        conn.close()
                    except Exception:  # noqa: BLE001 - connection may be dead
                        pass
            self.probe_lines.append((m.driver, method, kind, results))
            log('  probe', m.driver, method, kind, results)

    def render_probe(self):
        heads = [label for size, label in self.probe_sizes]
        lines = ['MariaDB: one INSERT of a single chunk of N bytes, P = max_allowed_packet = %s'
                 ' (FAIL 1153: packet too big; 2006: server closed the connection)'
                 % size_label(self.max_allowed_packet),
                 '%-12s %-18s %-7s ' % ('driver', 'method', 'data')
                 + ' '.join('%12s' % h for h in heads)]
        for driver, method, kind, results in self.probe_lines:
            lines.append('%-12s %-18s %-7s ' % (driver, method, kind)
                         + ' '.join('%12s' % x for x in results))
        return lines


# ---------------------------------------------------------------------------
# SQLite
# ---------------------------------------------------------------------------

class SqliteBench:
    def __init__(self, args, runner):
        self.args = args
        self.runner = runner

    def run(self):
        path = os.path.join(self.runner.workdir, 'blobfloor.sqlite3')
        conn = sqlite3.connect(path, isolation_level=None)  # explicit BEGIN/COMMIT
        try:
            conn.execute('PRAGMA journal_mode = WAL')
            conn.execute('PRAGMA synchronous = FULL')
            conn.execute("""
                CREATE TABLE blob_chunk (
                    blob_id INTEGER NOT NULL,
                    chunk_num INTEGER NOT NULL,
                    data BLOB NOT NULL,
                    PRIMARY KEY (blob_id, chunk_num))""")

            def write(blob_id, f, chunk_size):
                conn.execute('BEGIN')
                for num, data in enumerate(file_chunks(f, chunk_size)):
                    conn.execute('INSERT INTO blob_chunk (blob_id, chunk_num, data)'
                                 ' VALUES (?, ?, ?)', (blob_id, num, data))
                conn.execute('COMMIT')
                return blob_id

            def read(blob_id, out, size, chunk_size):
                for (data,) in conn.execute('SELECT data FROM blob_chunk WHERE blob_id = ?'
                                            ' ORDER BY chunk_num', (blob_id,)):
                    out.write(data)

            chunk = self.args.chunk_size
            label = size_label(chunk)
            key = ('sqlite', 'sqlite3', 'BLOB chunks')
            refs = self.runner.write(key + ('write', 'INSERT per chunk', label),
                                     write, chunk, read)
            self.runner.read(key + ('read', 'cursor over SELECT', label), read, chunk, refs)
            page_size = conn.execute('PRAGMA page_size').fetchone()[0]
        finally:
            conn.close()
        return ['SQLite %s: WAL, synchronous=FULL, page_size=%d, file in %s' % (
            sqlite3.sqlite_version, page_size, self.runner.workdir)]


# ---------------------------------------------------------------------------
# Shared blob directory (plain files)
# ---------------------------------------------------------------------------

class FilesBench:
    def __init__(self, args, runner):
        self.runner = runner

    def run(self):
        blobdir = os.path.join(self.runner.workdir, 'blobs')
        os.makedirs(blobdir, exist_ok=True)
        target = os.path.join(blobdir, 'blob')
        staged = os.path.join(blobdir, 'staged')
        key = ('files', 'os', 'shared directory', 'write')

        def copy(size, src):
            shutil.copyfile(src, target)

        def copy_fsync(size, src):
            shutil.copyfile(src, target)
            fd = os.open(target, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        def clear(size, src):
            if os.path.exists(target):
                os.unlink(target)

        def stage(size, src):
            clear(size, src)
            shutil.copyfile(src, staged)

        def rename(size, src):
            os.rename(staged, target)

        # Targets never exist beforehand (like new blob files): ext4 flushes
        # a file renamed over an existing one (auto_da_alloc).
        self.runner.timed(key + ('shutil.copyfile', '-'), copy, prepare=clear)
        self.runner.timed(key + ('copyfile + fsync', '-'), copy_fsync, prepare=clear)
        rename_key = key + ('os.rename (same fs)', '-')
        self.runner.timed(rename_key, rename, prepare=stage)
        os.unlink(target)
        cells = self.runner.table.rows[rename_key]
        times = ', '.join('%s %.3f ms' % (size_label(size), size / MiB / rate * 1000)
                          for size, (rate, growth) in sorted(cells.items()))
        return ['files: %s (same filesystem as the sources); os.rename median: %s'
                % (blobdir, times)]


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n\n')[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', default='10K,1M,100M',
                        type=lambda s: [parse_size(x) for x in s.split(',') if x.strip()],
                        help='blob sizes, comma separated, K/M/G = KiB/MiB/GiB '
                             '(default: 10K,1M,100M)')
    parser.add_argument('--repeat', type=int, default=3,
                        help='runs per measurement; the median is shown (default: 3)')
    parser.add_argument('--chunk-size', type=parse_size, default=MiB,
                        help='chunk (and large-object piece) size (default: 1M)')
    parser.add_argument('--big-chunk-size', type=parse_size, default=4 * MiB,
                        help='second chunk size, tried for blobs larger than it '
                             '(default: 4M)')
    parser.add_argument('--only', default='pg,mariadb,sqlite,files',
                        help='comma separated subset of pg,mariadb,sqlite,files')
    parser.add_argument('--pg-dsn', default='host=127.0.0.1 port=5432 user=root dbname=postgres',
                        help='libpq connection string of an existing database '
                             '(default: %(default)s)')
    parser.add_argument('--mysql-host', default='127.0.0.1')
    parser.add_argument('--mysql-port', type=int, default=3306)
    parser.add_argument('--mysql-user', default='root')
    parser.add_argument('--mysql-password', default='')
    parser.add_argument('--tmpdir', default=None,
                        help='where the temporary files and the SQLite database go')
    args = parser.parse_args(argv)
    args.sizes = sorted(set(args.sizes))
    args.only = {x.strip() for x in args.only.split(',')}
    unknown = args.only - {'pg', 'mariadb', 'sqlite', 'files'}
    if unknown:
        parser.error('unknown --only entries: %s' % ', '.join(sorted(unknown)))
    if args.repeat < 1:
        parser.error('--repeat must be at least 1')
    return args


def _terminate(signum, frame):
    raise SystemExit(128 + signum)  # so the finally blocks drop the databases


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix='blobfloor_', dir=args.tmpdir)
    runner = Runner(args, workdir)
    info, extra = [], []
    pg = PostgresBench(args, runner) if 'pg' in args.only else None
    my = MysqlBench(args, runner) if 'mariadb' in args.only else None
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
        for cleanup in ((pg.drop_dbs if pg else None), (my.drop_db if my else None),
                        lambda: shutil.rmtree(workdir, ignore_errors=True)):
            if cleanup is None:
                continue
            try:
                cleanup()
            except Exception as e:  # noqa: BLE001 - keep cleaning up
                errors.append(e)
                log('cleanup failed:', e)

    print('blob_floor: sizes %s, chunk %s (and %s for larger blobs), median of %d runs'
          % (','.join(size_label(s) for s in args.sizes), size_label(args.chunk_size),
             size_label(args.big_chunk_size), args.repeat))
    print('Python %s' % sys.version.split()[0])
    for line in info:
        print(line)
    print('MiB/s = blob size / time (write: read source file + upload + COMMIT;'
          ' read: download into a new file);')
    print('dRSS = largest growth of the resident set size during one run.')
    print()
    print(runner.table.render())
    for line in extra:
        print(line)
    print()
    print('total time %.0f s' % (time.perf_counter() - started))
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
