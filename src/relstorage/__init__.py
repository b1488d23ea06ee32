"""relstorage: a ZODB storage that keeps every object's pickle in a
relational database.

``from relstorage.storage import RelStorage`` and an adapter from
``relstorage.adapters`` give the Python API; ``%import relstorage`` gives
the ``<relstorage>`` section of ZODB and Zope configuration files.
"""
