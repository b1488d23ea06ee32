"""Object states kept in memory (and on disk) so that loads need not ask
the database.

- ``local``: the process-wide cache of object states that every instance
  of a storage shares, kept coherent by the polls;
- ``file`` and ``persistent``: that cache saved to ``cache-local-dir``
  when the storage closes and read back when it opens;
- ``recent``: recently seen revisions, for conflict resolution on a
  history-free database;
- ``readahead``: which objects to load together with the one asked for.

May import: the base modules (``errors``, ``tids``, ``metrics``).  Knows
nothing of SQL or of the storage: the storage tells it what changed.
"""
