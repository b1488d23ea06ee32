"""PostgreSQL drivers: psycopg2 (the default) and psycopg 3.

Each driver object gives the adapter what differs between the two modules:
connecting, bulk COPY, and the exception classes.  ``select_driver`` fails
at start-up, naming the package to install, when a named driver is missing.
"""
import struct

from relstorage.adapters import drivers

# The binary COPY format: a signature, flags and header-extension length,
# then one tuple per row (field count, then each field's length and bytes),
# then -1.  Used with psycopg2, which has no row-level COPY writer.
_COPY_HEADER = b'PGCOPY\n\xff\r\n\x00' + struct.pack('!ii', 0, 0)
_COPY_TRAILER = struct.pack('!h', -1)
_NULL = struct.pack('!i', -1)
_INT8 = struct.pack('!i', 8)


# A staged row (int, int, bytes, int, int, int), the usual shape, packed
# around its state with two calls: encoding 1000 rows took 2.6 ms field by
# field, a third of the COPY's time.
_STAGED_HEAD = struct.Struct('!hiqiqi').pack
_STAGED_TAIL = struct.Struct('!iqiqiq').pack
# A row of three ints (a reference: zoid, tid, to_zoid), packed whole.
_THREE_INTS = struct.Struct('!hiqiqiq').pack


def binary_copy_data(rows):
    """Encode rows of ints (BIGINT), bytes (BYTEA) and None as PostgreSQL's
    binary COPY format."""
    out = [_COPY_HEADER]
    append = out.append
    pack_q = struct.Struct('!q').pack
    pack_i = struct.Struct('!i').pack
    for row in rows:
        if len(row) == 3 and type(row[2]) is int:
            zoid, tid, to_zoid = row
            if type(zoid) is int and type(tid) is int:
                append(_THREE_INTS(3, 8, zoid, 8, tid, 8, to_zoid))
                continue
        if (len(row) == 6 and type(row[1]) is int
                and type(row[2]) is bytes):
            oid, prev, state, size, data_txn, ord_ = row
            append(_STAGED_HEAD(6, 8, oid, 8, prev, len(state)))
            append(state)
            append(_STAGED_TAIL(8, size, 8, data_txn, 8, ord_))
            continue
        append(struct.pack('!h', len(row)))
        for value in row:
            if value is None:
                append(_NULL)
            elif isinstance(value, int):
                append(_INT8)
                append(pack_q(value))
            else:
                append(pack_i(len(value)))
                append(value)
    append(_COPY_TRAILER)
    return b''.join(out)


class _PiecesReader:
    """A file whose read() gives the pieces of an iterable in turn (what
    psycopg2's copy_expert reads a COPY FROM STDIN from)."""

    def __init__(self, pieces):
        self._pieces = iter(pieces)

    def read(self, size=-1):
        return next(self._pieces, b'')


class BinaryCopyReader:
    """Parses PostgreSQL's binary COPY format as it arrives (``feed``, in
    pieces of any size) for rows of one bytea field, writing each field's
    bytes to ``out``; ``written`` counts them.  Holds at most one row that
    arrived split."""

    _HEADER = len(_COPY_HEADER)

    def __init__(self, out):
        self.out = out
        self.written = 0
        self._pending = bytearray()
        self._header_seen = False
        self.done = False

    def feed(self, data):
        if self._pending:
            self._pending += data
            data = memoryview(bytes(self._pending))
            self._pending = bytearray()
        else:
            data = memoryview(data)
        position = 0
        end = len(data)
        if not self._header_seen:
            if end < self._HEADER:
                self._pending += data
                return
            if bytes(data[:11]) != _COPY_HEADER[:11]:
                raise ValueError('not a binary COPY stream')
            position = self._HEADER
            self._header_seen = True
        while position < end and not self.done:
            if end - position < 2:
                break
            fields = _UNPACK_H(data, position)[0]
            if fields == -1:
                self.done = True
                return
            if end - position < 6:
                break
            length = _UNPACK_I(data, position + 2)[0]
            if fields != 1 or length < 0:
                raise ValueError('expected rows of one non-null field')
            if end - position < 6 + length:
                break
            self.out.write(data[position + 6:position + 6 + length])
            self.written += length
            position += 6 + length
        if position < end:
            self._pending += data[position:]

    # psycopg2's copy_expert writes the stream to a file.
    write = feed


_UNPACK_H = struct.Struct('!h').unpack_from
_UNPACK_I = struct.Struct('!i').unpack_from
_CHUNK_ROW_HEAD = struct.Struct('!hiqiii').pack


def chunk_rows(blob_id, pieces):
    """The binary COPY stream of ``blob_chunk`` rows (blob_id BIGINT,
    chunk_num INTEGER, data BYTEA) of ``pieces``, one row per piece, as an
    iterable of bytes."""
    yield _COPY_HEADER
    for num, data in enumerate(pieces):
        yield _CHUNK_ROW_HEAD(3, 8, blob_id, 4, num, len(data))
        yield data
    yield _COPY_TRAILER


def oid_array(oids):
    """``oids`` (ints) as one array literal, the value of a
    ``%s::bigint[]`` parameter.  psycopg2 adapts a list element by element
    into ``ARRAY[...]``: 858 us for 1,000 oids, where this string takes 94
    (on every commit's row locks and every prefetch).  ``str`` of an int
    is only digits and a sign, so nothing needs quoting."""
    return '{%s}' % ','.join(map(str, oids))


def bigint_array(values):
    """Like ``oid_array``, for ints or None (SQL NULL)."""
    return '{%s}' % ','.join([
        'NULL' if value is None else str(int(value)) for value in values])


def bytea_array(states):
    """``states`` (bytes, or None for SQL NULL) as one array literal, the
    value of a ``%s::bytea[]`` parameter: each element the hex form of
    bytea, quoted, its backslash doubled for the array syntax
    (``{"\\\\x6869",NULL}``).  Neither driver then escapes anything element
    by element."""
    return '{%s}' % ','.join([
        'NULL' if state is None else '"\\\\x%s"' % state.hex()
        for state in states])


#: In the statements that follow a call's COMMIT (``call_and_commit``): the
#: call's value, kept across the COMMIT in a session setting.
RESULT = "current_setting('relstorage.result')::bigint"
_RESULT = f'SELECT {RESULT}'
#: The same, leaving the setting empty: behind a transaction pooler the
#: server session goes to other clients next.  The outer SELECT empties it
#: as it takes each row from the sub-query (OFFSET 0: not flattened), so
#: it reads the value first.
RESULT_EMPTIED = (
    "SELECT CASE WHEN set_config('relstorage.result', '', false) = '' "
    f"THEN r END FROM (SELECT {RESULT} AS r OFFSET 0) AS s")


class Prepared:
    """One statement that every load and store connection prepares on the
    server, so that the hot paths (a load per object, the poll at every
    transaction) skip parsing and planning.  ``text`` uses ``%s``
    placeholders; ``types`` lists their SQL types.  Measured at 20,000
    objects with bare psycopg2: the history-preserving load (a join) took
    60-100 us as text and 30 us prepared, most of the difference being
    planning."""

    def __init__(self, name, types, text):
        self.name = name
        self.text = text
        count = text.count('%s')
        if count != len(types):
            raise ValueError(f'{name}: {count} placeholders, {len(types)} '
                             f'types')
        numbered = text
        for position in range(1, count + 1):
            numbered = numbered.replace('%s', f'${position}', 1)
        args = f' ({", ".join(types)})' if types else ''
        self.prepare_sql = f'PREPARE {name}{args} AS {numbered}'
        self.execute_sql = f'EXECUTE {name}' + (
            f' ({", ".join(["%s"] * count)})' if count else '')


class _Writer:
    """A file whose write() calls a function (psycopg2's copy_expert
    writes a COPY TO STDOUT to a file)."""

    def __init__(self, write):
        self.write = write


class Psycopg2Driver:
    name = 'psycopg2'
    #: Whether Prepared statements are prepared on the server (not behind
    #: a transaction pooler: the adapter's transaction-pooler).
    server_prepares = True
    package = 'psycopg2 (pip install psycopg2-binary, or relstorage[postgresql])'

    def __init__(self):
        import psycopg2
        import psycopg2.errors
        import psycopg2.extensions
        self.module = psycopg2
        self.Error = psycopg2.Error
        self.OperationalError = psycopg2.OperationalError
        self.InterfaceError = psycopg2.InterfaceError
        self.IntegrityError = psycopg2.IntegrityError

    def connect(self, dsn):
        conn = self.module.connect(dsn)
        conn.autocommit = True
        return conn

    def parse_dsn(self, dsn):
        from psycopg2.extensions import parse_dsn
        return parse_dsn(dsn)

    def make_dsn(self, dsn, **params):
        """``dsn`` with ``params`` set (replacing its own values), quoted
        as libpq wants."""
        from psycopg2.extensions import make_dsn
        return make_dsn(dsn, **params)

    def sqlstate(self, error):
        return getattr(error, 'pgcode', None)

    def prepare(self, cursor, statements):
        """Prepare ``statements`` (Prepared) in the cursor's session: SQL
        PREPARE, all in one round trip."""
        if statements and self.server_prepares:
            cursor.execute('; '.join(s.prepare_sql for s in statements))

    def _sql(self, statement):
        return statement.execute_sql if self.server_prepares else (
            statement.text)

    def execute_prepared(self, cursor, statement, params):
        cursor.execute(self._sql(statement), params)

    def execute_prepared_after(self, cursor, first, statement, params):
        """``first`` (statements without parameters or results), then
        ``statement``, in one round trip: psycopg2 binds on the client and
        sends both as one query.  Returns the second's rows."""
        cursor.execute(f'{first}; {self._sql(statement)}', params)
        return cursor.fetchall()

    def execute_after(self, cursor, statements, sql, params):
        """``statements`` (no parameters, no rows), then ``sql``: one
        query, one round trip; the cursor holds ``sql``'s rows."""
        cursor.execute('; '.join([*statements, sql]), params)

    def call_and_commit(self, cursor, call, params, then=_RESULT,
                        then_params=(), before=()):
        """``call`` (a SELECT of one value), the statements of ``before``
        (``[(sql, params)]``), COMMIT and ``then`` in one round trip;
        returns the rows of ``then``'s last statement, where ``RESULT`` is
        the value of ``call``.  psycopg2 binds on the client and sends
        several statements as one query; the value survives the COMMIT in
        a session setting."""
        middle, params = _before(params, then_params, before)
        cursor.execute(
            f"SELECT set_config('relstorage.result', ({call})::text, "
            f"false); {middle}COMMIT; {then}", params)
        return cursor.fetchall()

    def can_copy(self):
        """Whether COPY works: psycopg2 refuses it while a wait callback
        is set (gevent, through psycogreen)."""
        from psycopg2.extensions import get_wait_callback
        return get_wait_callback() is None

    def copy_in(self, cursor, table, columns, rows):
        import io
        if not self.can_copy():
            # Multi-row INSERTs, a thousand rows each (psycopg2's own
            # execute_values), where COPY cannot run.
            from psycopg2.extras import execute_values
            execute_values(
                cursor, f'INSERT INTO {table} ({", ".join(columns)}) '
                f'VALUES %s', rows, page_size=1000)
            return
        data = binary_copy_data(rows)
        cursor.copy_expert(
            f'COPY {table} ({", ".join(columns)}) FROM STDIN '
            f'WITH (FORMAT binary)', io.BytesIO(data), size=65536)

    def copy_in_stream(self, cursor, statement, pieces):
        """``COPY ... FROM STDIN`` (``statement``) of the bytes that
        ``pieces`` yields, one piece in memory at a time."""
        cursor.copy_expert(statement, _PiecesReader(pieces))

    def copy_out_stream(self, cursor, statement, write):
        """``COPY ... TO STDOUT`` (``statement``), handing the stream to
        ``write`` piece by piece as it arrives."""
        cursor.copy_expert(statement, _Writer(write))


def _before(params, then_params, before):
    """``call_and_commit``'s statements between the call and the COMMIT,
    and the parameters of the whole query in order."""
    middle = ''.join(f'{sql}; ' for sql, _ in before)
    for _, more in before:
        params = tuple(params) + tuple(more)
    return middle, tuple(params) + tuple(then_params)


class PsycopgDriver:
    name = 'psycopg'
    server_prepares = True      # (see Psycopg2Driver)
    package = 'psycopg 3 (pip install "psycopg[binary]", or relstorage[postgresql])'

    def __init__(self):
        import psycopg
        self.module = psycopg
        self.Error = psycopg.Error
        self.OperationalError = psycopg.OperationalError
        self.InterfaceError = psycopg.InterfaceError
        self.IntegrityError = psycopg.IntegrityError

    def connect(self, dsn):
        # prepare_threshold=None: no server-side prepared statements, which
        # would break behind transaction-pooling proxies (pgbouncer).
        return self.module.connect(dsn, autocommit=True, prepare_threshold=None)

    def can_copy(self):
        return True

    def parse_dsn(self, dsn):
        from psycopg.conninfo import conninfo_to_dict
        return conninfo_to_dict(dsn)

    def make_dsn(self, dsn, **params):
        from psycopg.conninfo import make_conninfo
        return make_conninfo(dsn, **params)

    def sqlstate(self, error):
        return getattr(error, 'sqlstate', None)

    def prepare(self, cursor, statements):
        # psycopg 3 prepares at the protocol level on first use (below),
        # which also works behind PgBouncer 1.21+ in transaction mode.
        pass

    def execute_prepared(self, cursor, statement, params):
        cursor.execute(statement.text, params, prepare=self.server_prepares)

    def _last_result(self, cursor, query, params):
        """Run ``query`` (several statements) in one round trip and return
        the last statement's rows.  The cursor's server-side binding takes
        one statement per query, so this goes through a client-binding
        cursor of the same connection (psycopg's ClientCursor: the simple
        query protocol, as psycopg2 always uses), which saves the round
        trip each further statement would cost."""
        with self.module.ClientCursor(cursor.connection) as client:
            client.execute(query, params)
            while client.nextset():
                pass
            return client.fetchall()

    def execute_prepared_after(self, cursor, first, statement, params):
        return self._last_result(cursor, f'{first}; {statement.text}', params)

    def execute_after(self, cursor, statements, sql, params):
        # One statement per query with server-side binding, but a pipeline
        # sends them all before reading any result: one round trip.  An
        # error in any of them is raised when the pipeline ends.
        with cursor.connection.pipeline():
            for statement in statements:
                cursor.execute(statement)
            cursor.execute(sql, params)

    def call_and_commit(self, cursor, call, params, then=_RESULT,
                        then_params=(), before=()):
        middle, params = _before(params, then_params, before)
        return self._last_result(
            cursor, f"SELECT set_config('relstorage.result', ({call})::text, "
            f"false); {middle}COMMIT; {then}", params)

    def copy_in(self, cursor, table, columns, rows):
        with cursor.copy(
                f'COPY {table} ({", ".join(columns)}) FROM STDIN '
                f'WITH (FORMAT binary)') as copy:
            copy.write(binary_copy_data(rows))

    def copy_in_stream(self, cursor, statement, pieces):
        with cursor.copy(statement) as copy:
            for piece in pieces:
                copy.write(piece)

    def copy_out_stream(self, cursor, statement, write):
        with cursor.copy(statement) as copy:
            for piece in copy:
                write(piece)


DRIVERS = {'psycopg2': Psycopg2Driver, 'psycopg': PsycopgDriver}


def select_driver(name):
    """The driver for the ``driver`` option: ``auto`` tries psycopg2, then
    psycopg 3."""
    return drivers.select_driver(
        name, DRIVERS, 'PostgreSQL',
        'install psycopg2 (pip install psycopg2-binary) or psycopg 3 (pip '
        'install "psycopg[binary]"), or relstorage[postgresql] for both')
