"""Shared default of the packer role (see interfaces.IPacker).

The packer runs SQL on a connection of its own; the pack pipeline that
drives it (analysis, graph walk, batched deletion) is relstorage.pack.
Helper tables (``pack_object``, ``pack_ref``, ``pack_garbage``) hold the
analysis, so deletions are joins against them, never sub-queries over the
whole object table.
"""
from relstorage.adapters.interfaces import IPacker
from relstorage.adapters.objects import _bytes
from zope.interface import implementer


@implementer(IPacker)
class Packer:

    CREATE_HELPERS = ()       # statements creating the helper tables
    CLEAR_HELPERS = ()        # statements emptying them
    FILL = None               # (pack_tid,)
    COUNT = 'SELECT COUNT(*) FROM pack_object'
    KEPT_STATES = None        # (after_zoid, limit) -> zoid, state
    NEWER_STATES = None       # (pack_tid, z, z, t, limit) -> zoid, tid, state
    ADD_REF = None            # (zoid, to_zoid)
    REFS_OF = None            # {in_list} -> to_zoid
    PACK_OIDS = None          # (after_zoid, limit) -> zoid, keep_null
    ADD_GARBAGE = None        # (zoid,)
    GARBAGE = None            # (after_zoid, limit) -> zoid
    DELETE_GARBAGE = ()       # statements taking (zoid, pack_tid)
    #: Locks the rows committers lock at vote, for the given zoids, skipping
    #: those already locked; returns the zoids locked.  None where there
    #: are no row locks (SQLite).
    LOCK_GARBAGE = None
    OLD_REVISIONS = None      # (after_zoid, limit) -> zoid, keep_tid
    DELETE_OLD = None         # (zoid, keep_tid)
    #: Like DELETE_OLD, for the rows that tie those revisions to their
    #: blobs (the chunks become orphans, removed after the deletions).
    DELETE_OLD_BLOBS = None
    FINISH = ()               # statements taking (pack_tid,)
    PARAM = '?'

    def prepare(self, cursor):
        for stmt in self.CREATE_HELPERS:
            cursor.execute(stmt)
        for stmt in self.CLEAR_HELPERS:
            cursor.execute(stmt)

    def fill(self, cursor, pack_tid):
        cursor.execute(self.FILL, (pack_tid,))
        cursor.execute(self.COUNT)
        return cursor.fetchone()[0]

    def kept_states(self, cursor, after_zoid, limit):
        cursor.execute(self.KEPT_STATES, (after_zoid, limit))
        return [(z, _bytes(s)) for z, s in cursor.fetchall()]

    def newer_states(self, cursor, pack_tid, after, limit):
        zoid, tid = after
        cursor.execute(self.NEWER_STATES, (pack_tid, zoid, zoid, tid, limit))
        return [(z, t, _bytes(s)) for z, t, s in cursor.fetchall()]

    def add_refs(self, cursor, refs):
        if refs:
            cursor.executemany(self.ADD_REF, refs)

    def refs_of(self, cursor, zoids):
        stmt = self.REFS_OF.format(in_list=', '.join([self.PARAM] * len(zoids)))
        cursor.execute(stmt, list(zoids))
        return [row[0] for row in cursor.fetchall()]

    def pack_oids(self, cursor, after_zoid, limit):
        cursor.execute(self.PACK_OIDS, (after_zoid, limit))
        return cursor.fetchall()

    def add_garbage(self, cursor, zoids):
        if zoids:
            cursor.executemany(self.ADD_GARBAGE, [(z,) for z in zoids])

    def garbage(self, cursor, after_zoid, limit):
        cursor.execute(self.GARBAGE, (after_zoid, limit))
        return [row[0] for row in cursor.fetchall()]

    def delete_garbage(self, cursor, zoids, pack_tid):
        for stmt in self.DELETE_GARBAGE:
            cursor.executemany(stmt, [(z, pack_tid) for z in zoids])

    def old_revisions(self, cursor, after_zoid, limit):
        if self.OLD_REVISIONS is None:
            return []
        cursor.execute(self.OLD_REVISIONS, (after_zoid, limit))
        return cursor.fetchall()

    def delete_old_revisions(self, cursor, rows):
        if self.DELETE_OLD is not None:
            cursor.executemany(self.DELETE_OLD, rows)
            cursor.executemany(self.DELETE_OLD_BLOBS, rows)

    def finish(self, cursor, pack_tid):
        for stmt in self.FINISH:
            cursor.execute(stmt, (pack_tid,))
