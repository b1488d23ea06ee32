"""Blob data in SQLite (the blob role): the shared default's statements,
one chunk per statement, which for an embedded database costs no round
trip."""
from relstorage.adapters.blobs import BlobMover


class SQLiteBlobMover(BlobMover):
    pass
