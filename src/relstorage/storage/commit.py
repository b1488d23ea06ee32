"""One commit in progress: what it stores, and how vote and finish publish it.

The path of a commit (see docs/architecture.rst):

1. ``store``/``restore``/``deleteObject``/``undo`` add rows to an in-memory
   buffer; past ``SPILL_BYTES`` the buffer is uploaded in bulk to the
   connection's staging table, so a huge transaction does not sit in memory.
2. ``vote`` uploads the rest, takes the object locks (no waiting past
   commit-lock-timeout), checks read-current objects, finds conflicts with
   one join and resolves them with ZODB's own conflict resolution.
3. ``finish`` takes the commit lock, lets the database clock choose the
   transaction id, moves the staged rows into place and commits.  The
   commit lock is held only for that last step.

Where the database says staging costs more than sending the rows with the
last step (``inline_limit``), a small commit that never spilled uploads
nothing at vote: its rows stay in memory, conflict resolution changes them
there, and ``finish`` hands them to ``finish_and_commit``.

A commit that stores blobs carries a ``relstorage.blobs.base.PendingBlobs``
(``blobs``): their data travels at vote, and they are tied to their
revisions by the step-by-step finish, under the commit lock, just before
the COMMIT.
"""
import time

from ZODB.POSException import ConflictError
from ZODB.POSException import ReadConflictError
from ZODB.POSException import StorageTransactionError
from ZODB.utils import p64

from relstorage.blobs.base import no_blob_dir
from relstorage.mirror.render import render
from relstorage.tids import choose_tid

#: Buffered pickle bytes past which rows are uploaded before vote.
SPILL_BYTES = 8 * 1024 * 1024
#: Seconds for which a commit's whole time is news to a pack's watch
#: (``PendingTransaction.recorded_seconds``): about a deletion batch's.
FRESH = 1.0


def _as_bytes(text):
    if isinstance(text, bytes):
        return text
    return (text or '').encode('utf-8')


def _extension_bytes(transaction):
    ext = getattr(transaction, 'extension_bytes', None)
    if ext is not None:
        return ext
    # A transaction.Transaction rather than ZODB's TransactionMetaData.
    from ZODB.Connection import TransactionMetaData
    return TransactionMetaData(
        extension=getattr(transaction, 'extension', None) or {}
    ).extension_bytes


class PendingTransaction:
    """The storage-side state of one transaction between tpc_begin and
    tpc_finish or tpc_abort."""

    def __init__(self, adapter, conn, cursor, transaction, tid=None,
                 status=' ', blob_support=None, oid_pool=None,
                 json_state=False, previous=None):
        self.adapter = adapter
        #: ``(ended, seconds)`` (monotonic) of the storage instance's last
        #: commit, or None (``recorded_seconds``).
        self.previous = previous
        #: The JSON mirror (json-state): ``{oid: (module, name, JSON text
        #: or None)}`` of the states stored, the oids deleted, and how many
        #: states could not be rendered; None without json-state.
        self.mirror = {} if json_state else None
        self.mirror_deleted = set()
        #: Whether rows of the mirror went to the database's staging table
        #: (a commit too large to keep them in memory: ``upload``).
        self.mirror_staged = False
        self.unrendered = 0
        #: The storage's relstorage.storage.oidpool.OIDPool (for ensure_above).
        self.oid_pool = oid_pool
        #: The storage's relstorage.blobs support, or None (no blob-dir).
        self.blob_support = blob_support
        self.conn = conn
        self.cursor = cursor
        self.transaction = transaction
        self.requested_tid = tid
        #: The last committed tid where the storage knows it without asking
        #: (inside a restore batch, which holds the commit lock), or None.
        self.last_committed = None
        #: History-free: the earliest tid of a restored record that keeps
        #: its own (``own_tid``), or None.
        self.earliest_own = None
        self.status = status
        self.user = _as_bytes(getattr(transaction, 'user', b''))
        self.description = _as_bytes(getattr(transaction, 'description', b''))
        self.extension = _extension_bytes(transaction)
        self.read_current = {}
        self.resolved = []
        self.voted = False
        #: The highest oid this transaction creates (a new object, or any
        #: record of a restore), -1 if none: only such oids may lie beyond
        #: what the allocator handed out (an existing object's was handed
        #: out, or moved past, when it was created).
        self.max_oid = -1
        self._rows = {}          # oid -> (prev_tid, state, data_txn)
        self._deletions = {}     # oid -> prev_tid, of deleteObject rows
        self._based_on = {}      # oid -> prev_tid (0: new), not restores
        self._order = {}         # oid -> position in store order
        self._next_ord = 0
        self.superseded = []     # (oid, state, data_txn, ord) of restores
        self._buffered = 0
        self._spilled = False
        # For the storage's metrics, and for the seconds an ordinary
        # commit records with its tid (a pack's watch reads them).
        self.started = time.monotonic()
        self.lock_wait = 0.0
        self.written = 0
        self._uploaded = set()
        self._committed_states = None
        self._inline = False     # rows go to finish_and_commit, not staged
        #: The commit's blobs (relstorage.blobs.base.PendingBlobs), or None.
        self.blobs = None
        #: ``{(oid, tid): state}`` read at vote for conflict resolution:
        #: the revisions conflicting rows were based on (loadSerial).
        self.base_states = {}
        #: The rows of the select ``finish`` ran after the COMMIT (its
        #: ``then``), or None.
        self.after_commit = None

    # -- phase 1 -------------------------------------------------------

    def add(self, oid, prev_tid, state, data_txn=0):
        """Stage one row.  A later row for the same oid replaces it, except
        in a restore (``prev_tid`` None, no conflict check), where the
        earlier record is kept as superseded: a copied FileStorage
        transaction may hold two records of one object, and the iterator
        gives both back."""
        if oid in self._order and prev_tid is None:
            earlier = self._rows.get(oid)
            if earlier is None:
                staged = self.adapter.mover.load_temp(self.cursor, oid)
                earlier = (staged[0], staged[1], staged[2])
            self.superseded.append(
                (oid, earlier[1], earlier[2], self._order[oid]))
            del self._order[oid]
        if oid not in self._order:
            self._order[oid] = self._next_ord
            self._next_ord += 1
        self._rows[oid] = (prev_tid, state, data_txn)
        if self.mirror is not None:
            self._mirror(oid, state)
        if prev_tid is not None:
            self._based_on[oid] = prev_tid
        if state is None and prev_tid:
            self._deletions[oid] = prev_tid
        elif self._deletions:
            self._deletions.pop(oid, None)
        if oid > self.max_oid and not prev_tid:
            self.max_oid = oid
        if state is not None:
            self._buffered += len(state)
            self.written += len(state)
        if self._buffered >= SPILL_BYTES:
            self.upload()
            if self.mirror:
                self._stage_mirror()

    def _mirror(self, oid, state):
        """Render ``state`` (the last stored for ``oid``) for the JSON
        mirror.  Never raises: a state that cannot be rendered gets a null
        and is counted."""
        if state is None:
            self.mirror.pop(oid, None)
            self.mirror_deleted.add(oid)
            return
        found = render(state)
        if found.error is not None:
            self.unrendered += 1
        self.mirror[oid] = (found.module, found.name, found.json)
        self.mirror_deleted.discard(oid)

    def _stage_mirror(self):
        """Send the mirror's rows to the staging table, with the pickles'
        (their memory is bounded the same way); the last statements move
        them (``_mirror_statements``)."""
        with self.adapter.connmanager.translate('staging the JSON mirror'):
            self.adapter.mirror.spill(
                self.cursor,
                [(oid, *row) for oid, row in self.mirror.items()],
                not self.mirror_staged)
        self.mirror_staged = True
        self.mirror = {}

    def _mirror_statements(self):
        """The statements that write the mirror's rows, or ()."""
        if not (self.mirror or self.mirror_deleted or self.mirror_staged):
            return ()
        return self.adapter.mirror.statements(
            [(oid, *row) for oid, row in self.mirror.items()],
            sorted(self.mirror_deleted), staged=self.mirror_staged)

    def own_tid(self, serial):
        """History-free restore: what stages as the row's ``data_txn`` for
        a record whose tid is ``serial`` (int).  The rows of a commit
        restoring several source transactions at once (zodbconvert into a
        history-free database) keep the tids they had there: 0 (the
        commit's tid) for the commit's own records, else ``serial``, which
        must precede the commit's tid, and at vote follow the last
        committed one (so that every poll after that one sees them)."""
        tid = self.requested_tid
        if tid is None or serial == tid:
            return 0
        if serial > tid:
            raise StorageTransactionError(
                f'restore(): the record\'s tid {p64(serial)!r} is later '
                f'than the transaction\'s {p64(tid)!r}')
        if self.earliest_own is None or serial < self.earliest_own:
            self.earliest_own = serial
        return serial

    def pending_blobs(self):
        """The commit's PendingBlobs, made at the first blob it stores."""
        if self.blobs is None:
            if self.blob_support is None:
                raise no_blob_dir('storing a blob')
            self.blobs = self.blob_support.begin()
        return self.blobs

    def upload(self):
        """Send the buffered rows to the staging table in one bulk call."""
        if not self._rows:
            return
        order = self._order
        replace = [oid for oid in self._rows if oid in self._uploaded]
        with self.adapter.connmanager.translate('staging pickles'):
            self.adapter.mover.upload_temp(self.cursor, [
                (oid, prev, state, data_txn, order[oid])
                for oid, (prev, state, data_txn) in self._rows.items()],
                replace)
        self._uploaded.update(self._rows)
        self._rows = {}
        self._buffered = 0
        self._spilled = True

    def pending(self, oid):
        """``(prev_tid, state)`` staged for ``oid`` in this transaction, or
        None."""
        row = self._rows.get(oid)
        if row is not None:
            return row[0], row[1]
        if self._spilled and oid in self._order:
            return self.adapter.mover.load_temp(self.cursor, oid)[:2]
        return None

    def states(self):
        """``{oid: state}`` of the rows still in memory (all of them unless
        the transaction was large enough to spill)."""
        return {oid: row[1] for oid, row in self._rows.items()}

    # -- phase 2 -------------------------------------------------------

    def vote(self, storage):
        """Lock, check and resolve; returns the oids whose data conflict
        resolution changed.  ``storage`` resolves conflicts."""
        adapter, cursor = self.adapter, self.cursor
        mover = adapter.mover
        # upload() starts a new buffer; ``rows`` keeps the staged ones.
        rows = self._rows if not self._spilled else None
        memory = self.states() if rows is not None else None
        limit = adapter.txncontrol.inline_limit
        self._inline = (rows is not None and limit is not None
                        and len(rows) <= limit[0]
                        and self._buffered <= limit[1])
        if not self._inline:
            self.upload()
        blobs = self.blobs or None
        # Blob data travels before the object locks are taken, except where
        # the database has one lock for all writes (it must be held to
        # write anything).
        blobs_first = (blobs is not None and not
                       adapter.capabilities.database_wide_write_lock)
        if blobs_first:
            blobs.upload(cursor)
        waiting = time.monotonic()
        locked, current = adapter.locker.lock_for_vote(
            cursor, sorted(self._order), sorted(self.read_current),
            staged=not self._inline)
        self.lock_wait = time.monotonic() - waiting
        if blobs is not None and not blobs_first:
            blobs.upload(cursor)
        self._check_requested_tid()
        if self.read_current:
            if current is None:
                current = mover.current_tids(cursor, list(self.read_current))
            for oid, expected in sorted(self.read_current.items()):
                committed = current.get(oid, 0)
                if committed != expected:
                    raise ReadConflictError(
                        oid=p64(oid), serials=(p64(committed), p64(expected)))
        if locked is not None and rows is not None:
            # The locking statement read the committed tids: compare them
            # with the staged rows here rather than join on the server.
            conflicts = [
                (oid, locked.get(oid, 0), prev, state)
                for oid, (prev, state, _) in sorted(rows.items())
                if prev is not None and locked.get(oid, 0) != prev]
        else:
            conflicts = mover.detect_conflicts(cursor)
        for oid, committed_tid, prev_tid, state in conflicts:
            if state is None or committed_tid == 0:
                # A deletion cannot be merged, nor can a change to an
                # object that no longer exists.
                raise ConflictError(
                    oid=p64(oid), serials=(p64(committed_tid), p64(prev_tid)),
                    data=state)
        # The committed states to merge with, in one round trip (the rows
        # are locked: they are the ones the locks read); with history, the
        # states the transaction started from too, which ZODB's resolution
        # reads with loadSerial (``base_states``).
        committed_states = {}
        if conflicts and mover.LOAD_REVISIONS is not None:
            found = mover.load_revisions(cursor, [
                revision for oid, committed_tid, prev_tid, _ in conflicts
                for revision in ((oid, committed_tid), (oid, prev_tid))])
            for oid, committed_tid, prev_tid, _ in conflicts:
                if (oid, committed_tid) in found:
                    committed_states[oid] = (found[oid, committed_tid],
                                             committed_tid)
                if (oid, prev_tid) in found:
                    self.base_states[oid, prev_tid] = found[oid, prev_tid]
        elif conflicts:
            committed_states = mover.load_currents(
                cursor, [conflict[0] for conflict in conflicts])
        for oid, committed_tid, prev_tid, state in conflicts:
            committed = committed_states.get(oid)
            committed_state = committed[0] if committed else None
            if committed_state is None:
                raise ConflictError(
                    oid=p64(oid), serials=(p64(committed_tid), p64(prev_tid)),
                    data=state)
            resolved = storage.tryToResolveConflict(
                p64(oid), p64(committed_tid), p64(prev_tid), state,
                committed_state)
            self._based_on[oid] = committed_tid
            if self._inline:
                self._rows[oid] = (committed_tid, resolved, 0)
            else:
                mover.replace_temp(cursor, oid, committed_tid, resolved)
            if memory is not None:
                memory[oid] = resolved
            if self.mirror is not None:
                self._mirror(oid, resolved)
            self.resolved.append(p64(oid))
        if blobs is not None:
            blobs.locked(cursor)
        self.voted = True
        self._committed_states = memory
        return self.resolved

    def _check_requested_tid(self, last=None):
        if self.requested_tid is None:
            return
        if last is None:
            last = self.last_committed
        if last is None:
            last = self.adapter.poller.last_tid(self.cursor)
        if self.requested_tid <= last:
            raise StorageTransactionError(
                f'cannot commit with tid {p64(self.requested_tid)!r}: it is '
                f'not later than the last committed tid {p64(last)!r}')
        if self.earliest_own is not None and self.earliest_own <= last:
            raise StorageTransactionError(
                f'cannot restore a record with tid '
                f'{p64(self.earliest_own)!r}: it is not later than the last '
                f'committed tid {p64(last)!r}')

    # -- phase 3 -------------------------------------------------------

    def recorded_seconds(self):
        """What an ordinary commit records with its tid for a pack's watch
        (relstorage.pack.watch): how slow this client's commits are now.
        The longer of this commit's time so far (from tpc_begin) and the
        whole time of the storage instance's previous commit, when that
        ended less than FRESH seconds ago: the last round trip, whose
        COMMIT waits for the log's flush, is part of a commit's time that
        only a later commit can record."""
        now = time.monotonic()
        seconds = now - self.started
        if self.previous is not None:
            ended, took = self.previous
            if now - ended < FRESH:
                seconds = max(seconds, took)
        return seconds

    def finish(self, allocated_through=None, commit=True, then=None):
        """Publish under the commit lock and commit; returns the int tid.
        Oids above ``allocated_through`` (the highest the allocator handed
        this process) move the allocator past them.  With ``commit`` false
        (a restore batch) the database transaction stays open, its staging
        table emptied for the next commit.  ``then``: statements to run
        after the COMMIT in the same round trip (see
        ITransactionControl.finish_and_commit), where the commit finishes
        in one call; their rows go to ``after_commit``."""
        adapter, cursor = self.adapter, self.cursor
        simple = (commit and self.requested_tid is None
                  and not self.superseded and not self.blobs and (
                      self.max_oid < 0 or allocated_through is None
                      or self.max_oid <= allocated_through))
        if simple and adapter.txncontrol.finish_and_commit is not None:
            # The database does the whole step in one call.
            rows = None
            if self._inline:
                # Without restores (not simple) the dict is in store order.
                rows = [(oid, prev_tid, state, data_txn)
                        for oid, (prev_tid, state, data_txn)
                        in self._rows.items()]
            before = self._mirror_statements()
            seconds = self.recorded_seconds()
            if then is None:
                return adapter.txncontrol.finish_and_commit(
                    cursor, self.user, self.description, self.extension,
                    self.status, rows=rows, before=before, seconds=seconds)
            tid, self.after_commit = adapter.txncontrol.finish_and_commit(
                cursor, self.user, self.description, self.extension,
                self.status, rows=rows, then=then, before=before,
                seconds=seconds)
            return tid
        if (self.requested_tid is not None and not self.superseded
                and adapter.txncontrol.finish_restore is not None):
            # A restore: the whole step in one call here too.  (With
            # blobs as well: every history-free restore into a database
            # keeping blobs has some, the removal of the object's former
            # blob, which took the step-by-step path's seven round trips.)
            return self._finish_restore(allocated_through, commit)
        if self._inline:
            # Voted without staging; the step-by-step path moves staged rows.
            self.upload()
        last, now = adapter.locker.hold_commit_lock(cursor)
        if self.requested_tid is not None:
            self._check_requested_tid(last)
            tid = self.requested_tid
        else:
            tid = choose_tid(now, last)
        adapter.txncontrol.record_transaction(
            cursor, tid, self.user, self.description, self.extension,
            self.status, seconds=(self.recorded_seconds()
                                  if self.requested_tid is None else None))
        adapter.mover.move_from_temp(cursor, tid)
        if self.superseded:
            adapter.mover.store_superseded(cursor, tid, self.superseded)
        for sql, params in self._mirror_statements():
            cursor.execute(sql, params)
        if self.max_oid >= 0 and (allocated_through is None
                                  or self.max_oid > allocated_through):
            # Only oids the allocator never handed out (restore, explicit
            # oids) need it; ordinary commits leave it alone.
            self._ensure_above(self.max_oid)
        if self.blobs:
            self.blobs.publish(cursor, tid)
        if commit:
            adapter.connmanager.commit(self.conn, cursor)
        else:
            adapter.mover.empty_temp(cursor)
        return tid

    def _finish_restore(self, allocated_through, commit):
        adapter, cursor = self.adapter, self.cursor
        if self.max_oid >= 0 and (allocated_through is None
                                  or self.max_oid > allocated_through):
            self._ensure_above(self.max_oid)
        rows = None
        if self._inline:
            rows = [(oid, prev_tid, state, data_txn)
                    for oid, (prev_tid, state, data_txn)
                    in self._rows.items()]
        if self.blobs:
            # The tid is known before the call: the blob rows go first, in
            # the same database transaction.
            self.blobs.publish(cursor, self.requested_tid)
        tid = adapter.txncontrol.finish_restore(
            cursor, self.requested_tid, self.user, self.description,
            self.extension, self.status, rows=rows,
            before=self._mirror_statements())
        if commit:
            adapter.connmanager.commit(self.conn, cursor)
        elif rows is None:
            adapter.mover.empty_temp(cursor)
        return tid

    def _ensure_above(self, oid):
        adapter = self.adapter
        if adapter.oids.ensure_above_own_connection:
            self.oid_pool.ensure_above(oid)
        else:
            adapter.oids.ensure_above(self.cursor, oid)

    def deletions(self):
        """``{oid: prev_tid}`` of the objects this commit deletes
        (deleteObject)."""
        return self._deletions

    def based_on(self):
        """``{oid: tid}``: the committed tid each object this transaction
        writes had when it was locked (0 for a new object); empty for a
        restore, which writes without a base."""
        return self._based_on

    def stored(self):
        """How many objects this transaction stores."""
        return len(self._order)

    def committed_states(self):
        """``{oid: state}`` as committed, when known without a query."""
        return self._committed_states or {}
