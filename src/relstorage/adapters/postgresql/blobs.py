"""Blob data in PostgreSQL (the blob role).

Chunks are bytea rows, not large objects, and travel both ways by binary
COPY, streamed a chunk at a time.  Measured with bare drivers on
PostgreSQL 15 (``benchmarks/blob_floor.py``, 1 MiB chunks, MiB/s for a
100 MB blob): reading, COPY TO binary 950-980 (either driver), a SELECT
per chunk 175 (psycopg2, which receives bytea as hex text) or 460
(psycopg 3 in binary), large objects 480 (psycopg2's lobject) or 395;
writing, COPY FROM binary 118-243, an INSERT per chunk 60 (psycopg2) or
111, large objects 115.  Large objects also took 134.5 MiB per 100 MiB
against 104, need lo_unlink beside every DELETE (or vacuumlo) and their
own privileges.  Lists of ids travel as one array parameter.  Under a
wait callback (gevent) psycopg2 refuses COPY: chunks then go an INSERT or
a SELECT at a time.
"""
from relstorage.adapters.blobs import BlobMover
from relstorage.adapters.blobs import incomplete
from relstorage.adapters.blobs import read_chunks

from .drivers import BinaryCopyReader
from .drivers import chunk_rows
from .drivers import oid_array

_COPY_IN = ('COPY blob_chunk (blob_id, chunk_num, data) FROM STDIN '
            'WITH (FORMAT binary)')
# COPY takes no bind parameters; the blob id is an int written out.
_COPY_OUT = ('COPY (SELECT data FROM blob_chunk WHERE blob_id = {blob_id:d} '
             'ORDER BY chunk_num) TO STDOUT WITH (FORMAT binary)')



class PostgreSQLBlobMover(BlobMover):

    PARAM = '%s'
    # Chunks move by COPY (upload, download below), or, where COPY cannot
    # run (psycopg2 under a wait callback), a statement per chunk as on
    # the other databases.
    INSERT_CHUNK = ('INSERT INTO blob_chunk (blob_id, chunk_num, data) '
                    'VALUES (%s, %s, %s)')
    CHUNK = ('SELECT data FROM blob_chunk '
             'WHERE blob_id = %s AND chunk_num = %s')
    BLOB_OF = ('SELECT blob_id, blob_size FROM object_blob '
               'WHERE zoid = %s AND tid = %s')
    COPY_CHUNKS = """
        INSERT INTO blob_chunk (blob_id, chunk_num, data)
        SELECT %s, chunk_num, data FROM blob_chunk WHERE blob_id = %s"""
    PUBLISH = """
        INSERT INTO object_blob (zoid, tid, blob_id, blob_size)
        VALUES (%s, %s, %s, %s)"""
    BLOBS_OF = 'SELECT blob_id FROM object_blob WHERE zoid = ANY(%s::bigint[])'
    DROP_BLOBS = 'DELETE FROM object_blob WHERE zoid = ANY(%s::bigint[])'
    DELETE_CHUNKS = 'DELETE FROM blob_chunk WHERE blob_id = ANY(%s::bigint[])'
    ORPHANS = """
        SELECT c.blob_id
        FROM blob_chunk c
        LEFT JOIN object_blob b ON b.blob_id = c.blob_id
        WHERE c.chunk_num = 0 AND c.blob_id > %s AND b.blob_id IS NULL
        ORDER BY c.blob_id
        LIMIT %s"""
    # Each object's revisions by key, whatever the statistics say: a
    # subquery per zoid (OFFSET 0 keeps it from being merged into a join).
    # ``zoid = ANY(array)`` leaves the plan to estimates that, without
    # statistics, take a few hundred zoids for most of the table (a
    # sequential scan on the tests' small tables: tests/test_pack_plans.py).
    # At 10,000,000 objects the blob directory's sweep after a pack, 500
    # objects a batch, had not ended after 4 minutes for 94,636 blobs; by
    # key it took 16-21 s.
    REVISIONS = """
        SELECT s.zoid, s.tid
        FROM unnest(%s::bigint[]) AS g(zoid),
             LATERAL (SELECT zoid, tid FROM object_state o
                      WHERE o.zoid = g.zoid OFFSET 0) s"""

    def __init__(self, driver):
        self.driver = driver

    def _in_list(self, values):
        # The statements take one array instead of an IN list.
        return '', (oid_array(values),)

    def upload(self, cursor, blob_id, path, chunk_size):
        if not self.driver.can_copy():
            return super().upload(cursor, blob_id, path, chunk_size)
        size = 0

        def pieces():
            nonlocal size
            for data in read_chunks(path, chunk_size):
                size += len(data)
                yield data

        self.driver.copy_in_stream(
            cursor, _COPY_IN, chunk_rows(blob_id, pieces()))
        return size

    def download(self, cursor, oid, tid, out):
        if not self.driver.can_copy():
            return super().download(cursor, oid, tid, out)
        row = self.blob_of(cursor, oid, tid)
        if row is None:
            return None
        blob_id, size = row
        reader = BinaryCopyReader(out)
        self.driver.copy_out_stream(
            cursor, _COPY_OUT.format(blob_id=int(blob_id)), reader.feed)
        if reader.written != size:
            raise incomplete(oid, tid, blob_id, reader.written, size)
        return size
