"""blob_floor.py on MariaDB (or MySQL), with mysqlclient and PyMySQL: a
``LONGBLOB`` chunk table written with the chunk as a parameter, a hex
literal or an escaped ``_binary`` literal, read per chunk, per range of
chunks or streamed; and which chunk sizes each upload method gets past
``max_allowed_packet``.
"""
import binascii
import os
import secrets

from harness import backends
from harness.report import log

from .runner import KiB, chunk_count, file_chunks, size_label


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
    """Every MariaDB measurement, in a database of its own
    (``blobfloor_<random hex>``, created and dropped with the harness's
    ``backends.MariaDB``)."""

    def __init__(self, args, runner):
        self.args = args
        self.runner = runner
        self.database = backends.MariaDB(args.mysql_host, args.mysql_port,
                                         args.mysql_user, args.mysql_passwd)
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
            kwargs.update(passwd=self.args.mysql_passwd, binary_prefix=True)
            if dbname:
                kwargs['db'] = dbname
        else:
            kwargs['password'] = self.args.mysql_passwd
            if dbname:
                kwargs['database'] = dbname
        return module.connect(**kwargs)

    def drop_db(self):
        if self.created:
            self.database.drop(self.dbname)
            self.created = False

    def run(self):
        import MySQLdb
        import MySQLdb.cursors
        import pymysql
        import pymysql.cursors
        self.database.create(self.dbname)
        self.created = True
        admin = self._connect(MySQLdb)
        try:
            cur = admin.cursor()
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
            log('  probe %s %s %s %s' % (m.driver, method, kind, results))

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


