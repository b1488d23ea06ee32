"""Shared default of the packer role (see interfaces.IPacker).

The packer runs SQL on a connection of its own; the pipeline that drives
it (reference analysis, the walk, batched deletion) is relstorage.pack.
The tables are those of migration step 0003-pack:

* ``object_ref`` (kept between packs): the references of every analysed
  revision, with ``pack_state`` saying how far the analysis has got;
* ``pack_run``, ``pack_object``, ``pack_reached`` (one pack's analysis,
  emptied when its deletions are done).

The walk and the deletions are joins against these tables, never
sub-queries over the object table.  Statements are written here with
``?`` placeholders; a database whose driver wants ``%s`` sets ``PARAM``
and gets them rewritten once per statement."""
import functools

from relstorage.adapters.interfaces import IPacker
from relstorage.adapters.objects import _bytes
from relstorage.adapters.objects import batched
from zope.interface import implementer

#: The layout of pack_run, pack_object and pack_reached that this code
#: writes; a pack_run of another format is never used.  (Format 1 removed
#: garbage and old revisions in two passes, phases 1 and 2; format 2 in
#: one, phase 1, except where revisions go by page: that pass, phase 1,
#: then the garbage, phase 2.)
FORMAT = 2

#: refs_zoid once every revision of refs_tid is analysed.
ALL = (1 << 63) - 1


@functools.lru_cache(maxsize=None)
def _with_param(statement, param):
    """``statement`` with its ``?`` placeholders written as ``param``
    (cached per statement and style, not per packer: a cache on the
    method would keep every packer alive)."""
    if param == '?':
        return statement
    return statement.replace('?', param)


class RefsState:
    """The row of ``pack_state``: how far the reference analysis has got.

    ``scan_tid`` is not 0 while a first analysis reads every current
    revision up to it in key order (``scan_zoid`` is the last object read);
    otherwise every current revision up to ``(refs_tid, refs_zoid)`` in
    (tid, zoid) order has been analysed."""

    __slots__ = ('refs_tid', 'refs_zoid', 'scan_tid', 'scan_zoid')

    def __init__(self, refs_tid=0, refs_zoid=ALL, scan_tid=0, scan_zoid=-1):
        self.refs_tid = refs_tid
        self.refs_zoid = refs_zoid
        self.scan_tid = scan_tid
        self.scan_zoid = scan_zoid

    def values(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __repr__(self):
        return f'RefsState{self.values()}'


class PackRun:
    """The row of ``pack_run``: one pack's analysis and its progress."""

    __slots__ = ('format', 'pack_tid', 'gc', 'refs_tid', 'objects', 'phase',
                 'upto', 'counts')

    #: Phases: analysing (no usable analysis yet), analysed (the
    #: deletions have got to ``upto``: a zoid, or a page where they go by
    #: page, ``Packer.by_page``), the garbage's remains after the pass by
    #: page (to zoid ``upto``), deletions done; and the row a pack leaves
    #: when it ran from its analysis to its end (``Packer.base``).
    ANALYSING, ANALYSED, REMAINS, DELETED, DONE = 0, 1, 2, 3, 4

    def __init__(self, format, pack_tid, gc, refs_tid, objects, phase, upto):  # noqa: A002 (the pack_run column's name)
        self.format = format
        self.pack_tid = pack_tid
        self.gc = bool(gc)
        self.refs_tid = refs_tid
        self.objects = objects
        self.phase = phase
        self.upto = upto
        #: (garbage objects, objects with old revisions) when the analysis
        #: that counted them is this process's (not stored).
        self.counts = None

    def __repr__(self):
        fields = ', '.join(f'{n}={getattr(self, n)!r}'
                           for n in self.__slots__[:-1])
        return f'PackRun({fields})'


@implementer(IPacker)
class Packer:

    PARAM = '?'

    REFS_STATE = """
        SELECT refs_tid, refs_zoid, scan_tid, scan_zoid
        FROM pack_state WHERE id = 0"""
    SET_REFS_STATE = (
        'DELETE FROM pack_state',
        """INSERT INTO pack_state
               (id, refs_tid, refs_zoid, scan_tid, scan_zoid)
           VALUES (0, ?, ?, ?, ?)""",
    )
    CLEAR_REFS = 'DELETE FROM object_ref'
    # The references analysed are those of current revisions (and, at a
    # pack, of the revisions it keeps that are no longer current): a
    # revision a newer one replaced before any pack looked is removed by
    # the next pack without being read.  Per history mode:
    COUNT_AFTER = None          # (tid,) -> current revisions after tid
    # A first analysis reads the current revisions in key order: on a large
    # table that is the order of the pages (InnoDB clusters by key), where
    # tid order would be a random read per row; so does a later one that
    # has many to read.  Those after (refs_tid, refs_zoid) in (tid, zoid)
    # order, up to scan_tid.  (zoid, refs_tid, refs_tid, refs_zoid,
    # scan_tid, limit)
    SCAN_PAGE = None
    # Later ones read what was written since, in tid order: the rest of one
    # transaction (tid, zoid, limit), then the transactions after it up to
    # a given one (tid, up_to, limit).
    TAIL_SAME = None
    TAIL_NEXT = None
    # Kept revisions that are no longer current and have no references
    # recorded (history-preserving: objects changed after the pack tid).
    # (pack_tid, after_zoid, limit) -> zoid, tid, state
    KEPT_UNANALYSED = None
    DROP_REFS = 'DELETE FROM object_ref WHERE zoid IN ({in_list})'
    ADD_REF = 'INSERT INTO object_ref (zoid, tid, to_zoid) VALUES (?, ?, ?)'

    RUN = """
        SELECT format, pack_tid, gc, refs_tid, objects, phase, upto
        FROM pack_run WHERE id = 0"""
    START_RUN = """
        INSERT INTO pack_run
            (id, format, pack_tid, gc, refs_tid, objects, phase, upto)
        VALUES (0, ?, ?, ?, ?, 0, 0, -1)"""
    UPDATE_RUN = 'UPDATE pack_run SET phase = ?, upto = ? WHERE id = 0'
    DONE_RUN = """
        INSERT INTO pack_run
            (id, format, pack_tid, gc, refs_tid, objects, phase, upto)
        VALUES (0, ?, ?, ?, ?, ?, 4, -1)"""
    ANALYSED_RUN = 'UPDATE pack_run SET phase = 1, objects = ? WHERE id = 0'
    CLEAR_RUN = (
        'DELETE FROM pack_run',
        'DELETE FROM pack_object',
        'DELETE FROM pack_reached',
    )
    FILL = None                   # (pack_tid,): per history mode
    # pack_object from a finished pack to ``since`` (see ``base``): the
    # objects unchanged since, and the others, in one statement
    # (since, since, pack_tid).  One, because each statement reads a
    # snapshot of its own (READ COMMITTED): as two, an object committed
    # between them was unchanged for the first and changed for the
    # second, and went in twice (a duplicate key that failed the pack,
    # with a writer running).  None: always FILL.
    FILL_SINCE = None
    # A transaction up to a tid that no pack has marked (restored after
    # that pack).  (tid,)
    UNPACKED = None
    # Objects in all, for the share written since (COUNT_AFTER).
    COUNT_CURRENT = None
    #: FILL_SINCE reads the objects written since by key, FILL reads every
    #: revision in the order of the table: past this share of the objects
    #: written since, FILL is the cheaper (per database).  PostgreSQL 15,
    #: 200,000 documents packed, grown by 10 % (a third of the objects
    #: written): 0.86 s against 1.43-1.69.
    FILL_SINCE_SHARE = 0.5
    COUNT_OBJECTS = 'SELECT COUNT(*) FROM pack_object'
    SEED = (
        # The root.
        'INSERT INTO pack_reached (zoid, depth) '
        'SELECT zoid, 0 FROM pack_object WHERE zoid = 0',
        # What revisions after the pack tid refer to ...
        """INSERT INTO pack_reached (zoid, depth)
           SELECT DISTINCT r.to_zoid, 0
           FROM object_ref r
           JOIN pack_object q ON q.zoid = r.to_zoid
           LEFT JOIN pack_reached x ON x.zoid = r.to_zoid
           WHERE r.tid > ? AND x.zoid IS NULL""",
    )
    # ... and the objects changed after the pack tid (per history mode).
    SEED_CHANGED = None
    # One step of the walk: what the kept revisions of the last step's
    # objects refer to, not reached yet.  (depth + 1, depth)
    # A reference to an object outside pack_object (one that does not
    # exist: kept revisions are at or before the pack tid, and so are the
    # objects they can refer to) is recorded too and goes no further: the
    # next step joins pack_object, and so does everything that reads
    # pack_reached.  Not looking each target up in pack_object made the
    # walk a fifth faster (PostgreSQL 15, 200,000 documents: 1.0-1.27 s
    # against 1.27-1.44).
    WALK_STEP = """
        INSERT INTO pack_reached (zoid, depth)
        SELECT DISTINCT r.to_zoid, ?
        FROM pack_reached f
        JOIN pack_object p ON p.zoid = f.zoid
        JOIN object_ref r ON r.zoid = p.zoid AND r.tid = p.keep_tid
        LEFT JOIN pack_reached x ON x.zoid = r.to_zoid
        WHERE f.depth = ? AND x.zoid IS NULL"""
    MAX_DEPTH = 'SELECT MAX(depth) FROM pack_reached'
    RESCUE = """
        INSERT INTO pack_reached (zoid, depth)
        SELECT p.zoid, ?
        FROM pack_object p
        LEFT JOIN pack_reached x ON x.zoid = p.zoid
        WHERE p.zoid IN ({in_list}) AND x.zoid IS NULL"""

    # What the deletions handle, by zoid: each object that goes (not
    # reached, with gc, or deleted as of the pack tid: garbage 1) and each
    # kept one with revisions older than the kept one (history-preserving:
    # garbage 0).  One pass for both, in key order: on a table larger than
    # the database's cache every page holding revisions of both is then
    # read and written once, not once per kind (MariaDB, 1,000,000
    # documents: see docs/performance.rst).
    # The bound on x is implied by the join, but PostgreSQL 15 does not
    # carry an inequality across it: its merge join read pack_reached
    # from its first key to the batch's each time (at 1,000,000
    # documents, up to 567,000 index entries a batch; the deletions of a
    # second pack took 16.4 s instead of 9.6 with batches a quarter the
    # size).  (after, after, limit)
    DOOMED_GC = """
        SELECT p.zoid, p.keep_tid,
               CASE WHEN x.zoid IS NULL OR p.keep_null THEN 1 ELSE 0 END
        FROM pack_object p
        LEFT JOIN pack_reached x ON x.zoid = p.zoid AND x.zoid > ?
        WHERE p.zoid > ? AND (x.zoid IS NULL OR p.keep_null OR p.has_older)
        ORDER BY p.zoid
        LIMIT ?"""
    DOOMED_NO_GC = """
        SELECT zoid, keep_tid, CASE WHEN keep_null THEN 1 ELSE 0 END
        FROM pack_object
        WHERE zoid > ? AND (keep_null OR has_older)
        ORDER BY zoid
        LIMIT ?"""
    COUNT_DOOMED_GC = """
        SELECT COUNT(*) FROM pack_object p
        LEFT JOIN pack_reached x ON x.zoid = p.zoid
        WHERE p.zoid > ? AND (x.zoid IS NULL OR p.keep_null OR p.has_older)"""
    COUNT_DOOMED_NO_GC = """
        SELECT COUNT(*) FROM pack_object
        WHERE zoid > ? AND (keep_null OR has_older)"""
    COUNT_GARBAGE_GC = """
        SELECT COUNT(*) FROM pack_object p
        LEFT JOIN pack_reached x ON x.zoid = p.zoid
        WHERE x.zoid IS NULL OR p.keep_null"""
    COUNT_GARBAGE_NO_GC = 'SELECT COUNT(*) FROM pack_object WHERE keep_null'
    # Kept objects with revisions older than the kept one (history-
    # preserving).
    COUNT_OLD_GC = """
        SELECT COUNT(*) FROM pack_object p
        JOIN pack_reached x ON x.zoid = p.zoid
        WHERE p.has_older AND NOT p.keep_null"""
    COUNT_OLD_NO_GC = """
        SELECT COUNT(*) FROM pack_object
        WHERE has_older AND NOT keep_null"""

    #: Statements taking ``{in_list}`` of zoids and the pack tid.
    DELETE_GARBAGE = ()
    #: The JSON mirror's rows of garbage (json-state), run after
    #: DELETE_GARBAGE where the mirror has rows; same parameters.
    DELETE_MIRROR = ('DELETE FROM object_json WHERE zoid IN ({in_list}) '
                     'AND tid <= ?')
    MIRROR_IN_USE = 'SELECT 1 FROM object_json LIMIT 1'
    #: Whether this pack deletes mirror rows too (``check_mirror``).
    mirror_in_use = False
    #: Statements taking (zoid, keep_tid) (history-preserving).
    DELETE_OLD = ()
    #: Whether revisions go first in a pass by page (``pages``,
    #: ``delete_pages``; PostgreSQL's says why), ``doomed`` then the
    #: garbage's remains.
    by_page = False
    MARK_PACKED = None            # (pack_tid,): history-preserving
    FINISH = ()                   # statements taking (pack_tid,)

    # References of reached objects to objects that do not exist.
    BROKEN_REFS = """
        SELECT r.zoid, r.to_zoid
        FROM pack_reached f
        JOIN pack_object p ON p.zoid = f.zoid
        JOIN object_ref r ON r.zoid = p.zoid AND r.tid = p.keep_tid
        LEFT JOIN pack_object q ON q.zoid = r.to_zoid
        WHERE q.zoid IS NULL OR q.keep_null
        ORDER BY r.zoid, r.to_zoid
        LIMIT ?"""

    # Revisions whose references could not be read (step 0006): while one
    # is still stored, a pack removes no garbage.  (zoid, tid), then
    # (zoid, tid, reason)
    ADD_UNREADABLE = (
        'DELETE FROM pack_unreadable WHERE zoid = ? AND tid = ?',
        'INSERT INTO pack_unreadable (zoid, tid, reason) VALUES (?, ?, ?)',
    )
    # Those whose revision is gone (replaced, packed away): a small table,
    # so the sub-query costs nothing.
    FORGET_UNREADABLE = """
        DELETE FROM pack_unreadable
        WHERE NOT EXISTS (
            SELECT 1 FROM object_state o
            WHERE o.zoid = pack_unreadable.zoid
              AND o.tid = pack_unreadable.tid)"""
    # Those a pack to a tid needs the references of: not replaced by a
    # newer revision up to it (which leaves them old revisions, removed).
    # (pack_tid,)
    UNREADABLE = """
        SELECT u.zoid, u.tid, u.reason
        FROM pack_unreadable u
        WHERE NOT EXISTS (
            SELECT 1 FROM object_state o
            WHERE o.zoid = u.zoid AND o.tid > u.tid AND o.tid <= ?)
        ORDER BY u.zoid, u.tid"""
    STOP_GC = 'UPDATE pack_run SET gc = ? WHERE id = 0'

    keep_history = None           # set by the history-mode mixins

    def __init__(self, connmanager):
        self.connmanager = connmanager

    # -- plumbing --------------------------------------------------------

    def _sql(self, statement):
        return _with_param(statement, self.PARAM)

    def _run(self, cursor, statement, params=()):
        cursor.execute(self._sql(statement), params)
        return cursor

    def _value(self, cursor, statement, params=()):
        row = self._run(cursor, statement, params).fetchone()
        return row[0] if row else None

    def _in(self, values):
        """``(the text inside IN (...), its parameters)``."""
        return ', '.join([self.PARAM] * len(values)), list(values)

    def _run_in(self, cursor, statement, zoids, before=(), after=()):
        """``statement`` with ``{in_list}`` for ``zoids`` (one batch), its
        other parameters ``before`` and ``after`` the list in the text;
        returns the row count."""
        in_list, in_params = self._in(zoids)
        cursor.execute(self._sql(statement).format(in_list=in_list),
                       list(before) + in_params + list(after))
        return cursor.rowcount

    # -- exclusion ---------------------------------------------------------

    def try_lock(self, conn, cursor):
        """Take the database's pack lock without waiting: a function that
        releases it, or None if another pack holds it (see
        IPacker.try_lock).  Closing the connection (or the end of the
        process) releases it too, or, for a lease, its expiry."""
        raise NotImplementedError

    def prepare_session(self, cursor):
        """Session settings of the pack's own connection (after
        ``try_lock``); none by default."""

    #: Whether ``waiters`` can tell (else it says None).
    counts_waiters = False

    def waiters(self, cursor):
        # (IPacker.waiters: unknown by default; the pack's throttle then
        # goes by commits, relstorage.pack.throttle.)
        return None

    def batch_end(self, cursor):
        # (IPacker.batch_end: where the log stands, unknown by default.)
        return self.waiters(cursor), None

    #: The last commit's tid and how slow its client's commits were, which
    #: every ordinary commit records (step 0008-commit-time).
    LAST_COMMIT = 'SELECT tid, commit_seconds FROM commit_row WHERE id = 0'
    #: Whether the pack's watch reads them (relstorage.pack.watch); else
    #: the throttle goes by lock waits, or by commits (SQLite).
    watches_commits = True

    def last_commit(self, cursor):
        """``(tid, seconds)`` of the last commit: how slow its client's
        commits were (PendingTransaction.recorded_seconds), None where it
        did not record that (a restore, or a commit before the upgrade).
        Asked by the pack's watch many times a second, each time in a
        transaction of its own."""
        tid, seconds = self._run(cursor, self.LAST_COMMIT).fetchone()
        return int(tid), None if seconds is None else float(seconds)

    def oldest_transaction(self, cursor):
        """The start (seconds since the epoch, the server's clock) of the
        oldest transaction still open in a session of this database that
        was not opened by this connection manager (the storage packing and
        its instances: the caller's own connections are its own business),
        or None (none, or the database cannot tell)."""
        return None

    # -- references --------------------------------------------------------

    def refs_state(self, cursor):
        row = self._run(cursor, self.REFS_STATE).fetchone()
        return RefsState(*row) if row else None

    def set_refs_state(self, cursor, state):
        delete, insert = self.SET_REFS_STATE
        self._run(cursor, delete)
        self._run(cursor, insert, state.values())

    def clear_refs(self, cursor):
        self._run(cursor, self.CLEAR_REFS)

    def count_after(self, cursor, tid):
        return self._value(cursor, self.COUNT_AFTER, (tid,))

    def _states(self, cursor):
        return [(z, t, _bytes(s)) for z, t, s in cursor.fetchall()]

    def scan_page(self, cursor, since, since_zoid, scan_tid, zoid, limit):
        self._run(cursor, self.SCAN_PAGE,
                  (zoid, since, since, since_zoid, scan_tid, limit))
        return self._states(cursor)

    def count_current(self, cursor):
        return self._value(cursor, self.COUNT_CURRENT)

    def kept_unanalysed(self, cursor, pack_tid, zoid, limit):
        if self.KEPT_UNANALYSED is None:
            return []
        self._run(cursor, self.KEPT_UNANALYSED, (pack_tid, zoid, limit))
        return self._states(cursor)

    def tail_page(self, cursor, tid, zoid, up_to, limit):
        self._run(cursor, self.TAIL_SAME, (tid, zoid, limit))
        rows = self._states(cursor)
        if len(rows) < limit:
            self._run(cursor, self.TAIL_NEXT,
                      (tid, up_to, limit - len(rows)))
            rows += self._states(cursor)
        return rows

    def drop_refs(self, cursor, zoids):
        for chunk in batched(zoids, 500):
            self._run_in(cursor, self.DROP_REFS, chunk)

    def add_refs(self, cursor, refs):
        if refs:
            cursor.executemany(self._sql(self.ADD_REF), refs)

    def add_unreadable(self, cursor, rows):
        """Record revisions ``(zoid, tid, reason)`` whose references could
        not be read."""
        delete, insert = self.ADD_UNREADABLE
        for zoid, tid, reason in rows:
            self._run(cursor, delete, (zoid, tid))
            self._run(cursor, insert, (zoid, tid, reason))

    def unreadable(self, cursor, pack_tid=None):
        """``[(zoid, tid, reason)]``: the revisions whose references could
        not be read that a pack to ``pack_tid`` (None: to now) needs; the
        rows of those no longer stored are dropped."""
        self._run(cursor, self.FORGET_UNREADABLE)
        return [tuple(row) for row in self._run(
            cursor, self.UNREADABLE,
            ((1 << 63) - 1 if pack_tid is None else pack_tid,)).fetchall()]

    # -- one pack's analysis ---------------------------------------------

    def run(self, cursor):
        row = self._run(cursor, self.RUN).fetchone()
        return PackRun(*row) if row else None

    def clear_run(self, cursor):
        for statement in self.CLEAR_RUN:
            self._run(cursor, statement)

    def start_run(self, cursor, pack_tid, gc, refs_tid):
        self._run(cursor, self.START_RUN, (FORMAT, pack_tid, gc, refs_tid))

    def stop_gc(self, cursor):
        """The pack in progress removes no more garbage (a revision whose
        references cannot be read was committed meanwhile)."""
        self._run(cursor, self.STOP_GC, (False,))

    def update_run(self, cursor, phase, upto):
        self._run(cursor, self.UPDATE_RUN, (phase, upto))

    def analysed(self, cursor, objects):
        self._run(cursor, self.ANALYSED_RUN, (objects,))

    def done(self, cursor, run):
        """Leave ``run`` (its analysis tables emptied) as a finished pack
        that a later one may build on (``base``)."""
        self._run(cursor, self.DONE_RUN, (FORMAT, run.pack_tid, run.gc,
                                          run.refs_tid, run.objects))

    def base(self, cursor, earlier, pack_tid):
        """The pack tid of ``earlier`` when a pack to ``pack_tid`` may build
        its pack_object from it, else None.

        A pack that ran from its analysis to its end, skipping no object
        (``done``), leaves every object at most one revision up to its
        pack tid, with a state: it removed the rest.  Objects not written
        since then need no look at object_state, whose rows carry every
        pickle.  Not when this version of relstorage did not write that
        row, when this pack goes back before it, or when a transaction up
        to it is not marked packed (restored into the database after that
        pack)."""
        if (not self.FILL_SINCE or earlier is None
                or earlier.phase != earlier.DONE or earlier.format != FORMAT
                or earlier.pack_tid > pack_tid):
            return None
        since = earlier.pack_tid
        if self._run(cursor, self.UNPACKED, (since,)).fetchone():
            return None
        changed = self.count_after(cursor, since)
        if changed > self.FILL_SINCE_SHARE * self._value(
                cursor, self.COUNT_CURRENT):
            return None
        return since

    def fill(self, cursor, pack_tid, since=None):
        """Record each object's newest revision up to ``pack_tid`` (from
        the finished pack to ``since`` when given: ``base``)."""
        if since is None:
            self._run(cursor, self.FILL, (pack_tid,))
        else:
            self._run(cursor, self.FILL_SINCE, (since, since, pack_tid))
        return self.count_objects(cursor)

    def count_objects(self, cursor):
        return self._value(cursor, self.COUNT_OBJECTS)

    def seed(self, cursor, pack_tid):
        root, refs = self.SEED
        objects = self.SEED_CHANGED
        count = max(self._run(cursor, root).rowcount, 0)
        count += max(self._run(cursor, refs, (pack_tid,)).rowcount, 0)
        count += max(self._run(cursor, objects, (pack_tid,)).rowcount, 0)
        return count

    def walk_step(self, cursor, depth, frontier=None):
        return self._run(cursor, self.WALK_STEP, (depth + 1, depth)).rowcount

    def max_depth(self, cursor):
        depth = self._value(cursor, self.MAX_DEPTH)
        return -1 if depth is None else depth

    def rescue(self, cursor, zoids, depth):
        """Mark reached, at ``depth``, the objects of ``zoids`` that the
        analysis found unreachable; returns how many."""
        count = 0
        for chunk in batched(sorted(set(zoids)), 500):
            count += self._run_in(cursor, self.RESCUE, chunk, before=(depth,))
        return count

    # -- deletion ----------------------------------------------------------

    def doomed(self, cursor, gc, after, limit):
        """Up to ``limit`` rows ``(zoid, keep_tid, garbage)`` after zoid
        ``after``: the objects that go (``garbage`` true) and the kept
        ones with older revisions."""
        if gc:
            statement, params = self.DOOMED_GC, (after, after, limit)
        else:
            statement, params = self.DOOMED_NO_GC, (after, limit)
        return [(zoid, keep_tid, bool(garbage)) for zoid, keep_tid, garbage
                in self._run(cursor, statement, params).fetchall()]

    def count_doomed(self, cursor, gc, after):
        """How many rows ``doomed`` has after zoid ``after``."""
        return self._value(
            cursor, self.COUNT_DOOMED_GC if gc else self.COUNT_DOOMED_NO_GC,
            (after,))

    def count_garbage(self, cursor, gc):
        return self._value(
            cursor, self.COUNT_GARBAGE_GC if gc else self.COUNT_GARBAGE_NO_GC)

    def count_old(self, cursor, gc):
        if not self.keep_history:
            return 0
        return self._value(
            cursor, self.COUNT_OLD_GC if gc else self.COUNT_OLD_NO_GC)

    def lock_garbage(self, cursor, zoids, pack_tid):
        """The zoids of ``zoids`` whose rows this transaction could lock
        without waiting (the others are being committed: not garbage)."""
        return zoids

    def check_mirror(self, cursor):
        """Whether the JSON mirror has rows, which the deletion of garbage
        must remove too (one query a pack, where a statement a batch would
        cost a round trip each for the databases without a mirror)."""
        self.mirror_in_use = bool(
            self._run(cursor, self.MIRROR_IN_USE).fetchall())
        return self.mirror_in_use

    def garbage_statements(self):
        """DELETE_GARBAGE, and DELETE_MIRROR where the mirror has rows."""
        if self.mirror_in_use:
            return self.DELETE_GARBAGE + (self.DELETE_MIRROR,)
        return self.DELETE_GARBAGE

    def delete_garbage(self, cursor, zoids, pack_tid):
        """Remove every revision at or before ``pack_tid`` of the objects
        of ``zoids`` that can be locked at once; returns how many."""
        zoids = self.lock_garbage(cursor, zoids, pack_tid)
        for chunk in batched(zoids, 500):
            for statement in self.garbage_statements():
                self._run_in(cursor, statement, chunk, after=(pack_tid,))
        return len(zoids)

    def delete_old_revisions(self, cursor, rows):
        """Remove the revisions older than ``keep_tid`` of each row
        ``(zoid, keep_tid)``."""
        for statement in self.DELETE_OLD:
            cursor.executemany(self._sql(statement), rows)

    def delete_doomed(self, cursor, rows, pack_tid):
        """Apply rows of ``doomed`` in the caller's transaction; returns
        how many were applied (garbage being committed is skipped)."""
        garbage = [zoid for zoid, _, gone in rows if gone]
        old = [(zoid, keep_tid) for zoid, keep_tid, gone in rows if not gone]
        applied = len(old)
        if garbage:
            applied += self.delete_garbage(cursor, garbage, pack_tid)
        if old:
            self.delete_old_revisions(cursor, old)
        return applied

    def mark_packed(self, cursor, pack_tid):
        if self.MARK_PACKED:
            self._run(cursor, self.MARK_PACKED, (pack_tid,))

    def finish(self, cursor, pack_tid):
        for statement in self.FINISH:
            self._run(cursor, statement, (pack_tid,))

    def broken_refs(self, cursor, limit):
        return self._run(cursor, self.BROKEN_REFS, (limit,)).fetchall()

    # -- space -------------------------------------------------------------

    def reclaim_space(self, connmanager):
        """Give the space of removed rows back (VACUUM, OPTIMIZE TABLE);
        returns a description of what ran."""
        raise NotImplementedError


class HistoryPreservingMixin:
    """The statements that differ with history (portable forms)."""

    keep_history = True
    COUNT_AFTER = 'SELECT COUNT(*) FROM current_object WHERE tid > ?'
    # The page of current_object first, as a derived table: joined
    # directly, PostgreSQL without fresh statistics sorted every remaining
    # row for each page (187 ms a page of 2,000, against 4 ms).
    SCAN_PAGE = """
        SELECT c.zoid, c.tid, o.state
        FROM (SELECT zoid, tid FROM current_object
              WHERE zoid > ? AND (tid > ? OR (tid = ? AND zoid > ?))
                AND tid <= ?
              ORDER BY zoid
              LIMIT ?) c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        ORDER BY c.zoid"""
    TAIL_SAME = """
        SELECT c.zoid, c.tid, o.state
        FROM (SELECT zoid, tid FROM current_object
              WHERE tid = ? AND zoid > ?
              ORDER BY zoid
              LIMIT ?) c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        ORDER BY c.zoid"""
    TAIL_NEXT = """
        SELECT c.zoid, c.tid, o.state
        FROM (SELECT zoid, tid FROM current_object
              WHERE tid > ? AND tid <= ?
              ORDER BY tid, zoid
              LIMIT ?) c
        JOIN object_state o ON o.zoid = c.zoid AND o.tid = c.tid
        ORDER BY c.tid, c.zoid"""
    KEPT_UNANALYSED = """
        SELECT p.zoid, p.keep_tid, o.state
        FROM current_object c
        JOIN pack_object p ON p.zoid = c.zoid
        JOIN object_state o ON o.zoid = p.zoid AND o.tid = p.keep_tid
        WHERE c.tid > ? AND p.zoid > ?
          AND NOT EXISTS (SELECT 1 FROM object_ref r
                          WHERE r.zoid = p.zoid AND r.tid = p.keep_tid)
        ORDER BY p.zoid
        LIMIT ?"""
    SEED_CHANGED = """
        INSERT INTO pack_reached (zoid, depth)
        SELECT p.zoid, 0
        FROM current_object c
        JOIN pack_object p ON p.zoid = c.zoid
        LEFT JOIN pack_reached x ON x.zoid = p.zoid
        WHERE c.tid > ? AND x.zoid IS NULL"""

    # One pass over object_state in key order, nothing joined: whether the
    # newest revision deletes the object is whether the newest deleting
    # one is it.  (Joined back to object_state for its state, MariaDB 10.11
    # ran a grouping per row, a LATERAL DERIVED: 22.8 s at 1,000,000
    # documents against 15.2.)
    FILL = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT zoid, MAX(tid),
               COALESCE(MAX(CASE WHEN state IS NULL THEN tid END)
                        = MAX(tid), FALSE),
               COUNT(*) > 1
        FROM object_state
        WHERE tid <= ?
        GROUP BY zoid"""
    FILL_SINCE = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT zoid, tid, FALSE, FALSE
        FROM current_object
        WHERE tid <= ?
        UNION ALL
        SELECT s.zoid, MAX(s.tid),
               COALESCE(MAX(CASE WHEN s.state IS NULL THEN s.tid END)
                        = MAX(s.tid), FALSE),
               COUNT(*) > 1
        FROM current_object c
        JOIN object_state s ON s.zoid = c.zoid
        WHERE c.tid > ? AND s.tid <= ?
        GROUP BY s.zoid"""
    UNPACKED = """
        SELECT tid FROM transaction_log
        WHERE tid <= ? AND NOT packed
        LIMIT 1"""
    COUNT_CURRENT = 'SELECT COUNT(*) FROM current_object'
    MARK_PACKED = """
        UPDATE transaction_log SET packed = TRUE
        WHERE tid <= ? AND NOT packed"""
    FINISH = (
        """DELETE FROM transaction_log
           WHERE tid <= ?
             AND NOT EXISTS (SELECT 1 FROM object_state o
                             WHERE o.tid = transaction_log.tid)""",
        """DELETE FROM superseded_state
           WHERE tid <= ?
             AND NOT EXISTS (SELECT 1 FROM object_state o
                             WHERE o.zoid = superseded_state.zoid
                               AND o.tid = superseded_state.tid)""",
    )


class HistoryFreeMixin:

    keep_history = False
    COUNT_CURRENT = 'SELECT COUNT(*) FROM object_state'
    COUNT_AFTER = 'SELECT COUNT(*) FROM object_state WHERE tid > ?'
    SCAN_PAGE = """
        SELECT zoid, tid, state FROM object_state
        WHERE zoid > ? AND (tid > ? OR (tid = ? AND zoid > ?)) AND tid <= ?
        ORDER BY zoid
        LIMIT ?"""
    TAIL_SAME = """
        SELECT zoid, tid, state FROM object_state
        WHERE tid = ? AND zoid > ?
        ORDER BY zoid
        LIMIT ?"""
    TAIL_NEXT = """
        SELECT zoid, tid, state FROM object_state
        WHERE tid > ? AND tid <= ?
        ORDER BY tid, zoid
        LIMIT ?"""
    SEED_CHANGED = """
        INSERT INTO pack_reached (zoid, depth)
        SELECT p.zoid, 0
        FROM object_state o
        JOIN pack_object p ON p.zoid = o.zoid
        LEFT JOIN pack_reached x ON x.zoid = p.zoid
        WHERE o.tid > ? AND x.zoid IS NULL"""
    # What objects outside pack_object refer to: their revision is after
    # the pack tid, though the one analysed may not be (it was current
    # when analysed, and replaced before the fill).
    SEED = (
        Packer.SEED[0],
        """INSERT INTO pack_reached (zoid, depth)
           SELECT DISTINCT r.to_zoid, 0
           FROM object_ref r
           LEFT JOIN pack_object p ON p.zoid = r.zoid
           JOIN pack_object q ON q.zoid = r.to_zoid
           LEFT JOIN pack_reached x ON x.zoid = r.to_zoid
           WHERE (p.zoid IS NULL OR r.tid > ?) AND x.zoid IS NULL""",
    )

    FILL = """
        INSERT INTO pack_object (zoid, keep_tid, keep_null, has_older)
        SELECT zoid, tid, state IS NULL, FALSE
        FROM object_state
        WHERE tid <= ?"""
