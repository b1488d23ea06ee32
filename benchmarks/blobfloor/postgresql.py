"""blob_floor.py on PostgreSQL, with psycopg2 and psycopg 3: large objects
and a ``bytea`` chunk table (EXTERNAL and EXTENDED storage), written and
read per chunk or by binary COPY, and what deleting a big blob costs on
the server in either layout.
"""
import secrets
import struct
import time

from harness import backends
from harness.report import log

from .runner import MiB, chunk_count, file_chunks, size_label


# -- the binary COPY format, produced and parsed incrementally --------------

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



# -- the measurements ---------------------------------------------------------

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


class _Methods:
    """What both drivers do alike: a connection, and one INSERT per chunk
    into a chunk table."""

    def __init__(self, conn):
        self.conn = conn

    def write_insert(self, table):
        sql = pg_insert_sql(table)

        def write(blob_id, f, chunk_size):
            cur = self.conn.cursor()
            for num, data in enumerate(file_chunks(f, chunk_size)):
                cur.execute(sql, (blob_id, num, data))
            self.conn.commit()
            return blob_id
        return write


class Psycopg2Methods(_Methods):
    """psycopg2: parameters are interpolated client-side (bytea as a hex
    literal) and results arrive as text (bytea hex-decoded by the driver)."""

    driver = 'psycopg2'

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


class Psycopg3Methods(_Methods):
    """psycopg 3: server-side parameters (bytes sent binary); results as
    text unless ``binary=True``."""

    driver = 'psycopg3'

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
    """Every PostgreSQL measurement, in databases of its own
    (``blobfloor_<random hex>``, created and dropped with the harness's
    ``backends.PostgreSQL``)."""

    def __init__(self, args, runner):
        self.args = args
        self.runner = runner
        self.database = backends.PostgreSQL(args.pg_dsn)
        self.dbname = 'blobfloor_' + secrets.token_hex(4)
        self.created = []

    # -- database lifecycle --
    def create_db(self, name):
        self.database.create(name)
        self.created.append(name)

    def drop_dbs(self):
        while self.created:
            self.database.drop(self.created.pop())

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


