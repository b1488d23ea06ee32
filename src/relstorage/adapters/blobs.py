"""Shared default of the blob role (see interfaces.IBlobMover).

Blob data kept in the database (``shared-blob-dir false``) lives in
``blob_chunk`` rows of at most ``blob-chunk-size`` bytes under a blob id of
its own, and ``object_blob`` ties a revision ``(zoid, tid)`` to its blob
(schema version 2, ``migrations/0002-blobs``).  Data moves one chunk per
statement both ways here, which bounds the memory of any driver; an
adapter overrides a method where its database has a faster way that is
still bounded (PostgreSQL's COPY).
"""
from ZODB.POSException import StorageError
from zope.interface import implementer

from relstorage.adapters.interfaces import IBlobMover
from relstorage.adapters.objects import _bytes
from relstorage.adapters.objects import batched


def read_chunks(path, chunk_size):
    """Yield the contents of the file ``path`` in pieces of ``chunk_size``
    bytes (none for an empty file)."""
    with open(path, 'rb') as f:
        while True:
            data = f.read(chunk_size)
            if not data:
                return
            yield data


def incomplete(oid, tid, blob_id, written, size):
    return StorageError(
        f'the blob of oid 0x{oid:x} at tid 0x{tid:x} is damaged in the '
        f'database: blob {blob_id} has {written} bytes of chunks where '
        f'object_blob says {size}')


@implementer(IBlobMover)
class BlobMover:

    PARAM = '?'
    #: How many values one ``IN (...)`` list may carry.
    IN_BATCH = 500

    INSERT_CHUNK = (
        'INSERT INTO blob_chunk (blob_id, chunk_num, data) VALUES (?, ?, ?)')
    BLOB_OF = (
        'SELECT blob_id, blob_size FROM object_blob WHERE zoid = ? AND tid = ?')
    CHUNK = 'SELECT data FROM blob_chunk WHERE blob_id = ? AND chunk_num = ?'
    COPY_CHUNKS = """
        INSERT INTO blob_chunk (blob_id, chunk_num, data)
        SELECT ?, chunk_num, data FROM blob_chunk WHERE blob_id = ?"""
    PUBLISH = """
        INSERT INTO object_blob (zoid, tid, blob_id, blob_size)
        VALUES (?, ?, ?, ?)"""
    BLOBS_OF = 'SELECT blob_id FROM object_blob WHERE zoid IN ({in_list})'
    DROP_BLOBS = 'DELETE FROM object_blob WHERE zoid IN ({in_list})'
    DELETE_CHUNKS = 'DELETE FROM blob_chunk WHERE blob_id IN ({in_list})'
    # Chunk 0 stands for its blob: a blob's chunks are written and deleted
    # in one transaction, so none is ever left without chunk 0.
    ORPHANS = """
        SELECT c.blob_id
        FROM blob_chunk c
        LEFT JOIN object_blob b ON b.blob_id = c.blob_id
        WHERE c.chunk_num = 0 AND c.blob_id > ? AND b.blob_id IS NULL
        ORDER BY c.blob_id
        LIMIT ?"""
    REVISIONS = 'SELECT zoid, tid FROM object_state WHERE zoid IN ({in_list})'

    def check_chunk_size(self, connmanager, chunk_size):
        """Nothing to check where any chunk fits a statement."""

    def _in_list(self, values):
        """``(the text inside IN (...), its parameters)``."""
        return ', '.join([self.PARAM] * len(values)), list(values)

    def upload(self, cursor, blob_id, path, chunk_size):
        size = 0
        for num, data in enumerate(read_chunks(path, chunk_size)):
            cursor.execute(self.INSERT_CHUNK, (blob_id, num, data))
            size += len(data)
        return size

    def blob_of(self, cursor, oid, tid):
        """``(blob_id, size)`` of the revision's blob, or None."""
        cursor.execute(self.BLOB_OF, (oid, tid))
        return cursor.fetchone()

    def download(self, cursor, oid, tid, out):
        row = self.blob_of(cursor, oid, tid)
        if row is None:
            return None
        blob_id, size = row
        written = self.read_chunks(cursor, blob_id, size, out)
        if written != size:
            raise incomplete(oid, tid, blob_id, written, size)
        return size

    def read_chunks(self, cursor, blob_id, size, out, num=0, written=0):
        """Append the chunks of ``blob_id`` from chunk ``num`` on (with
        ``written`` bytes before it) to ``out``, one statement each;
        returns the bytes written in all."""
        while written < size:
            cursor.execute(self.CHUNK, (blob_id, num))
            found = cursor.fetchone()
            if found is None:
                break
            data = _bytes(found[0])
            out.write(data)
            written += len(data)
            num += 1
        return written

    def copy(self, cursor, oid, tid, blob_id):
        row = self.blob_of(cursor, oid, tid)
        if row is None:
            return None
        source, size = row
        cursor.execute(self.COPY_CHUNKS, (blob_id, source))
        return size

    def publish(self, cursor, tid, rows):
        cursor.executemany(self.PUBLISH, [
            (oid, tid, blob_id, size) for oid, blob_id, size in rows])

    def drop(self, cursor, oids):
        for chunk in batched(oids, self.IN_BATCH):
            in_list, params = self._in_list(chunk)
            cursor.execute(self.BLOBS_OF.format(in_list=in_list), params)
            blob_ids = [row[0] for row in cursor.fetchall()]
            if not blob_ids:
                continue
            cursor.execute(self.DROP_BLOBS.format(in_list=in_list), params)
            self.delete_chunks(cursor, blob_ids)

    def orphans(self, cursor, after, limit):
        cursor.execute(self.ORPHANS, (after, limit))
        return [row[0] for row in cursor.fetchall()]

    def delete_chunks(self, cursor, blob_ids):
        for chunk in batched(blob_ids, self.IN_BATCH):
            in_list, params = self._in_list(chunk)
            cursor.execute(self.DELETE_CHUNKS.format(in_list=in_list), params)

    def revisions(self, cursor, oids):
        found = set()
        for chunk in batched(oids, self.IN_BATCH):
            in_list, params = self._in_list(chunk)
            cursor.execute(self.REVISIONS.format(in_list=in_list), params)
            found.update(cursor.fetchall())
        return found
