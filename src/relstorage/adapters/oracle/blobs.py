"""Blob data in Oracle (the blob role): the shared one-chunk-per-statement
mover, with Oracle's binds.  A chunk travels as a LONG RAW bind into the
BLOB column (any size up to the chunk size, without a temporary LOB) and
is fetched as bytes, one chunk in memory at a time both ways."""
from relstorage.adapters.blobs import BlobMover
from relstorage.adapters.blobs import read_chunks

from .binds import in_binds


class OracleBlobMover(BlobMover):

    INSERT_CHUNK = """
        INSERT INTO blob_chunk (blob_id, chunk_num, data)
        VALUES (:blob_id, :chunk_num, :data)"""
    BLOB_OF = """
        SELECT blob_id, blob_size FROM object_blob
        WHERE zoid = :oid AND tid = :tid"""
    CHUNK = """
        SELECT data FROM blob_chunk
        WHERE blob_id = :blob_id AND chunk_num = :chunk_num"""
    COPY_CHUNKS = """
        INSERT INTO blob_chunk (blob_id, chunk_num, data)
        SELECT :new_blob_id, chunk_num, data FROM blob_chunk
        WHERE blob_id = :source_blob_id"""
    PUBLISH = """
        INSERT INTO object_blob (zoid, tid, blob_id, blob_size)
        VALUES (:zoid, :tid, :blob_id, :blob_size)"""
    BLOBS_OF = 'SELECT blob_id FROM object_blob WHERE zoid IN ({in_list})'
    DROP_BLOBS = 'DELETE FROM object_blob WHERE zoid IN ({in_list})'
    DELETE_CHUNKS = 'DELETE FROM blob_chunk WHERE blob_id IN ({in_list})'
    ORPHANS = """
        SELECT c.blob_id
        FROM blob_chunk c
        LEFT JOIN object_blob b ON b.blob_id = c.blob_id
        WHERE c.chunk_num = 0 AND c.blob_id > :after AND b.blob_id IS NULL
        ORDER BY c.blob_id
        FETCH FIRST :n ROWS ONLY"""
    REVISIONS = 'SELECT zoid, tid FROM object_state WHERE zoid IN ({in_list})'

    def __init__(self, connmanager):
        self.connmanager = connmanager

    def _in_list(self, values):
        return in_binds(values)

    def upload(self, cursor, blob_id, path, chunk_size):
        binary = self.connmanager.driver.LONG_BINARY
        size = 0
        for num, data in enumerate(read_chunks(path, chunk_size)):
            cursor.setinputsizes(None, None, binary)
            cursor.execute(self.INSERT_CHUNK, (blob_id, num, data))
            size += len(data)
        return size
