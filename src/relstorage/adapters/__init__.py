"""Database adapters: the shared role defaults live in this package, one
subpackage per database fills them in (see interfaces.py).

May import: the base modules (``errors``, ``tids``, ``config.options``,
``config.replicas``, ``relstorage.migrations``).  An adapter knows SQL
and its database's locks, never the storage, its caches or blobs."""
