"""Blob data in MySQL and MariaDB (the blob role).

A chunk travels as one statement, written as a hexadecimal literal, so it
must fit the server's max_allowed_packet at twice its size;
``check_chunk_size`` refuses at start-up a blob-chunk-size that cannot,
naming both settings.  Measured with bare drivers on MariaDB 10.11
(``benchmarks/blob_floor.py``, 1 MiB chunks, a 100 MB blob): the hex
literal 66 MiB/s with either driver, mysqlclient's escaped parameter 30
(escaping for the connection's utf8mb4 costs twice the time of latin1;
PyMySQL sends bytes as hex anyway).  Reading, one SELECT per chunk ran at
1.0-1.2 GB/s, as fast as fetching several chunks per query or an
unbuffered cursor, so the shared default's reads are kept for small blobs;
the first chunk comes with the query that finds the blob, so a blob of one
chunk costs one round trip (RelStorage 4.3: three).

Large blobs (the number of chunks told by the size of the first) are read
by several connections at once.  A chunk that is not
in the buffer pool is read by InnoDB one 16 KiB page at a time, each read
waiting for the disk: one connection read a cold 100 MiB blob at 168 MiB/s
(median of 18), two connections taking alternate chunks at 308, three at
380, four at 390 (MariaDB 10.11, 2 cores, O_DIRECT; the same as a bare
``dd`` of 16 KiB pages, 207-239 MB/s, against 470 with two at once).  The
extra connections read committed data, not the snapshot; chunks never
change once committed, and a chunk they do not find (the revision was
removed since the snapshot began) is read from the snapshot instead.
"""
import queue
import threading

from relstorage.adapters.blobs import BlobMover
from relstorage.adapters.blobs import incomplete
from relstorage.adapters.blobs import read_chunks
from relstorage.adapters.objects import _bytes
from relstorage.errors import ConfigurationError

from .objects import in_list

#: Connections that read a large blob at once, and the blobs that count
#: as large (in chunks).
READERS = 3
PARALLEL_FROM = 8
#: Chunks a reader may hold ahead of the writer.
AHEAD = 2

#: Room in a packet for the statement around a chunk.
_STATEMENT_OVERHEAD = 1024


class MySQLBlobMover(BlobMover):

    PARAM = '%s'
    # Written out (upload, below): ints and a hexadecimal literal.
    INSERT_CHUNK = ('INSERT INTO blob_chunk (blob_id, chunk_num, data) '
                    "VALUES (%d, %d, X'%s')")
    BLOB_OF = ('SELECT blob_id, blob_size FROM object_blob '
               'WHERE zoid = %s AND tid = %s')
    CHUNK = 'SELECT data FROM blob_chunk WHERE blob_id = %s AND chunk_num = %s'
    COPY_CHUNKS = """
        INSERT INTO blob_chunk (blob_id, chunk_num, data)
        SELECT %s, chunk_num, data FROM blob_chunk WHERE blob_id = %s"""
    PUBLISH = """
        INSERT INTO object_blob (zoid, tid, blob_id, blob_size)
        VALUES (%s, %s, %s, %s)"""
    ORPHANS = """
        SELECT c.blob_id
        FROM blob_chunk c
        LEFT JOIN object_blob b ON b.blob_id = c.blob_id
        WHERE c.chunk_num = 0 AND c.blob_id > %s AND b.blob_id IS NULL
        ORDER BY c.blob_id
        LIMIT %s"""

    #: The revision's blob and its first chunk, in one round trip (a blob
    #: of one chunk, the usual case, then costs one).
    BLOB_AND_FIRST = """
        SELECT b.blob_id, b.blob_size, c.data
        FROM object_blob b
        LEFT JOIN blob_chunk c ON c.blob_id = b.blob_id AND c.chunk_num = 0
        WHERE b.zoid = %s AND b.tid = %s"""

    def __init__(self, connmanager=None):
        self.connmanager = connmanager

    def _in_list(self, values):
        # Ints written out, as for the object mover's lists (objects.py).
        return in_list(values), None

    def download(self, cursor, oid, tid, out):
        cursor.execute(self.BLOB_AND_FIRST, (oid, tid))
        row = cursor.fetchone()
        if row is None:
            return None
        blob_id, size, first = row
        num = written = 0
        if first is not None:
            first = _bytes(first)
            out.write(first)
            num, written = 1, len(first)
        if written < size and written and self.connmanager is not None:
            # Every chunk but the last has the first one's size.
            chunks = -(-size // written)
            if chunks - 1 >= PARALLEL_FROM:
                num, written = self._read_parallel(
                    blob_id, chunks, out, num, written)
        # The rest (all of it, unless read in parallel; a chunk a reader
        # missed) from the snapshot.
        written = self.read_chunks(cursor, blob_id, size, out, num, written)
        if written != size:
            raise incomplete(oid, tid, blob_id, written, size)
        return size

    def _read_parallel(self, blob_id, chunks, out, start=0, written=0):
        """Write chunks ``start``, ``start + 1``, ... of ``blob_id`` to
        ``out`` in order, read by READERS connections of their own (reader
        k takes chunks start + k, start + k + READERS, ...); returns
        ``(chunks written, bytes written)`` counted from chunk 0 (with
        ``written`` bytes before ``start``), stopping at the first chunk a
        reader could not give."""
        readers = min(READERS, chunks - start)
        queues = [queue.Queue(maxsize=AHEAD) for _ in range(readers)]
        stop = threading.Event()
        threads = [threading.Thread(
            target=self._reader, args=(blob_id, chunks, readers, start + k,
                                       queues[k], stop),
            name=f'blob-reader-{k}', daemon=True) for k in range(readers)]
        for thread in threads:
            thread.start()
        num = start
        try:
            while num < chunks:
                data = queues[(num - start) % readers].get()
                if data is None:
                    break
                out.write(data)
                written += len(data)
                num += 1
        finally:
            stop.set()
            for pending in queues:      # let blocked readers finish
                while not pending.empty():
                    pending.get_nowait()
            for thread in threads:
                thread.join()
        return num, written

    def _reader(self, blob_id, chunks, readers, first, out, stop):
        cm = self.connmanager
        conn = cursor = None

        def put(item):
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    pass
            return False
        try:
            conn = cm.connect()
            cursor = conn.cursor()
            for num in range(first, chunks, readers):
                cursor.execute(self.CHUNK, (blob_id, num))
                found = cursor.fetchone()
                if found is None:
                    break
                if not put(_bytes(found[0])):
                    return
        except Exception:       # the snapshot's cursor reads the rest
            pass
        finally:
            put(None)
            if conn is not None:
                cm.close(conn, cursor)

    def upload(self, cursor, blob_id, path, chunk_size):
        size = 0
        for num, data in enumerate(read_chunks(path, chunk_size)):
            cursor.execute(self.INSERT_CHUNK % (blob_id, num, data.hex()))
            size += len(data)
        return size

    def check_chunk_size(self, connmanager, chunk_size):
        packet = connmanager.max_allowed_packet
        if packet is None:
            conn = connmanager.connect()    # learns max_allowed_packet
            connmanager.close(conn, None)
            packet = connmanager.max_allowed_packet
        # A chunk travels as a hexadecimal literal: twice its size.
        needed = 2 * chunk_size + _STATEMENT_OVERHEAD
        if packet and needed > packet:
            raise ConfigurationError(
                f'blob-chunk-size: {chunk_size} bytes cannot travel within '
                f'the server\'s max_allowed_packet ({packet} bytes; a chunk '
                f'needs up to twice its size plus {_STATEMENT_OVERHEAD}): '
                f'lower blob-chunk-size to at most '
                f'{(packet - _STATEMENT_OVERHEAD) // 2} or raise '
                f'max_allowed_packet on the server')
