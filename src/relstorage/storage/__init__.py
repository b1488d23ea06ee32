"""The storage: ``RelStorage`` and what its methods are made of.

``relstorage.storage.RelStorage`` is the class ZODB opens (its import path
is public: configurations and applications name it).  The modules here:

- ``core``: the class, its instances, loads and the IStorage methods;
- ``snapshot``: an instance's read snapshot and polling;
- ``commit``: one commit in progress (store, vote, finish);
- ``outcome``: what became of a commit whose connection was lost;
- ``undo``, ``iteration``, ``bulkcopy``: undo, transaction iteration,
  restore batches and emptying the database (``zodbconvert``);
- ``oidpool``: the object ids reserved from the database;
- ``reconnect``: reopening a connection the database dropped.

May import: the base modules (``errors``, ``tids``, ``metrics``,
``progress``, ``config.options``, ``config.replicas``), ``adapters``,
``blobs``, ``cache`` and ``pack``.  Nothing below imports this package,
except the entry points (``config.zconfig``, ``config.uri``, ``cli``).
"""
from relstorage.storage.core import RelStorage

__all__ = ['RelStorage']
