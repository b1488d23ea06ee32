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
unbuffered cursor, so the shared default's reads are kept.
"""
from relstorage.adapters.blobs import BlobMover
from relstorage.adapters.blobs import read_chunks
from relstorage.errors import ConfigurationError

from .objects import in_list

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

    def _in_list(self, values):
        # Ints written out, as for the object mover's lists (objects.py).
        return in_list(values), None

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
