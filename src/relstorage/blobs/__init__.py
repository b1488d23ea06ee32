"""ZODB blobs: large files attached to objects (IBlobStorage).

Two modes, chosen by ``shared-blob-dir`` (see docs/blobs.rst):

* ``shared.SharedBlobs``: blobs live only in ``blob-dir``, which every
  client mounts, in ZODB's directory layout; the database never sees them.
* ``database.DatabaseBlobs``: blobs live in the database, in chunks of
  ``blob-chunk-size``, and ``blob-dir`` is this machine's cache of them
  (``cache.py`` keeps it within ``blob-cache-size``).

Either way one object serves a root storage and all its instances, and a
commit that stores blobs gets a ``PendingBlobs`` of the mode, which the
commit (``storage/commit.py``) drives at vote, under the commit lock, after the commit
and at abort.  The SQL is the adapter's blob role (``adapters/<db>/blobs.py``).

May import: the base modules.  The storage hands this package the
adapter it works with; it never imports the adapters or the storage.
"""
from relstorage.blobs.database import DatabaseBlobs
from relstorage.blobs.shared import SharedBlobs


def make_blobs(options, adapter, oids):
    """The blob support of a root storage, or None without ``blob-dir``.
    ``oids`` (the storage's OIDPool) hands out blob ids in the database
    mode."""
    if not options.blob_dir:
        return None
    if options.shared_blob_dir:
        return SharedBlobs(options, adapter)
    return DatabaseBlobs(options, adapter, oids)
