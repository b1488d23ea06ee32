"""Copying one ZODB storage into another, and checking the copy
(``zodbconvert``; callable from Python).

- ``convert``: ``copy(source, destination, incremental=False,
  progress=None)``, transaction by transaction with its blobs;
- ``verify``: ``verify(source, destination, report, progress=None)``,
  comparing records (and blobs) of both.

May import: the base modules (``errors``, ``tids``, ``progress``).  Works
on any pair of ZODB storages through their interfaces; it never reaches
into relstorage's adapters.
"""
from relstorage.copy.convert import copy
from relstorage.copy.verify import verify

__all__ = ['copy', 'verify']
