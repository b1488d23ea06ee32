"""The contracts between the backend-neutral core and a database adapter.

An adapter is a small set of *roles*, each in a module of the same name in
every adapter package (``connection.py``, ``schema.py``, ``locks.py``,
``objects.py``, ``oids.py``, ``poll.py``, ``history.py``, ``blobs.py``).  The shared
default implementation of a role lives next to this file
(``adapters/objects.py`` ...) and runs the SQL constants its per-database
subclass supplies; an adapter overrides a method only where its database
really differs.

Conventions for every role:

* Object ids and transaction ids cross this boundary as Python ints (the
  database's signed 64-bit integers); the core converts to and from ZODB's
  8-byte strings.
* Methods receive the cursor to use; roles hold no connection state of
  their own (except the OID allocator's block, see IOIDAllocator), so one
  adapter serves every storage instance of a process.
* Driver errors are translated into relstorage.errors exceptions by the
  connection manager's ``translate`` context manager; roles do not catch
  them.
"""
from zope.interface import Attribute
from zope.interface import Interface


class IAdapter(Interface):
    """One database, as seen by a RelStorage and all its instances."""

    keep_history = Attribute("True for the history-preserving schema.")
    capabilities = Attribute(
        "An ICapabilities describing what the database can do.")
    connmanager = Attribute("IConnectionManager")
    schema = Attribute("ISchema")
    locker = Attribute("ILocker")
    mover = Attribute("IObjectMover")
    oids = Attribute("IOIDAllocator")
    poller = Attribute("IPoller")
    txncontrol = Attribute("ITransactionControl")
    history = Attribute("IHistory")
    packer = Attribute("IPacker")
    blobs = Attribute("IBlobMover")

    def configure(options):
        """Bind the adapter to a relstorage.config.options.Options.

        Called once by the root storage before any other use; builds the
        roles for the configured history mode.  Calling it again with
        different options raises ConfigurationError.
        """

    def database_size():
        """Bytes the database occupies (for getSize()), or 0 if unknown."""

    def describe():
        """A short text naming the database for logs and getName(),
        never containing a password."""


class ICapabilities(Interface):
    """What a database can do; the core and the tests branch on these,
    never on the database's name."""

    advisory_locks = Attribute("Session or transaction advisory locks.")
    row_lock_nowait = Attribute("SELECT ... FOR UPDATE NOWAIT.")
    shared_row_locks = Attribute("SELECT ... FOR SHARE (read-current).")
    database_wide_write_lock = Attribute(
        "Only one writer at a time for the whole database (SQLite): the "
        "vote-time lock is the commit lock.")
    multiple_processes = Attribute(
        "Several processes may use the database at once.")
    tids_from_local_clock = Attribute(
        "Transaction ids come from this process's clock (an embedded "
        "database).  False: from the database server's clock, so that "
        "clients with skewed clocks still agree.")
    network_round_trips = Attribute(
        "Each statement is a round trip to a server.  False for an "
        "embedded database, where a query costs microseconds and batching "
        "reads (read-ahead) saves nothing.")
    lists_open_transactions = Attribute(
        "The server tells when the open transactions of other sessions "
        "began (a pack moves its time back before the oldest, see "
        "IPacker.oldest_transaction).")
    json_mirror = Attribute(
        "The adapter writes the JSON mirror (json-state, IMirror).")


class IConnectionManager(Interface):
    """Opens, closes and (re)starts database connections."""

    def describe():
        """Where the database is, for messages; never a password."""

    uses_replicas = Attribute(
        "Whether replica-conf or ro-replica-conf is set (see "
        "relstorage.config.replicas).")

    def connect(read_only=False):
        """A new connection in autocommit mode: to the first server of the
        replica list that answers (ro-replica-conf's for ``read_only``,
        else replica-conf's; a read-write one refuses a server that does
        not accept writes), else to the configured server.  Raises
        DisconnectedError when none answers."""

    def server_of(conn):
        """``host[:port]`` of the replica-list server ``conn`` went to, or
        None (the configured server)."""

    def replaced(conn):
        """Whether ``conn`` should be closed and opened again between
        transactions: its replica list prefers another server now."""

    def open_load():
        """Open a connection for reading snapshots (read-only: to
        ro-replica-conf's servers where set).  Returns ``(conn, cursor)``.
        No transaction is open on return."""

    def open_store():
        """Open a connection for committing.  Returns ``(conn, cursor)``.
        Its lock waits are bounded by commit-lock-timeout."""

    def prepare_store(conn, cursor, rollback=False):
        """Make a connection opened by ``open_load`` fit for committing, as
        ``open_store`` makes its own (the staging table and what else
        commits need in the session), first ending the transaction it is
        in if ``rollback``.  Needed only where IPoller.poll_after_commit is
        supported."""

    def begin_store(conn, cursor):
        """Start the transaction of a commit (at tpc_begin), with lock waits
        bounded by commit-lock-timeout.  On a database with one write lock
        this starts nothing; the lock is taken at vote."""

    def begin_snapshot(conn, cursor):
        """Start a read-only transaction whose snapshot stays fixed until
        ``rollback``; returns nothing.  The first statement run on
        ``cursor`` afterwards fixes the snapshot."""

    def sync(cursor):
        """Make the reads of the current transaction see every commit the
        database acknowledged before this call: a node of a cluster that
        applies other nodes' commits after acknowledging them (Galera)
        waits until it has applied them.  A no-op elsewhere."""

    def cluster_view(cursor):
        """An identifier of the current membership of the cluster the
        server belongs to, which changes whenever a node leaves or joins
        (Galera's ``wsrep_cluster_conf_id``); None where the server is not
        a node of such a cluster."""

    def begin_write(cursor, what):
        """Start a transaction that will write, waiting at most
        commit-lock-timeout for the database to allow it (``what`` names the
        work in the timeout message).  A no-op where every transaction may
        write."""

    def begin_analysis(conn, cursor):
        """Start the transaction in which a pack analyses the database and
        fills its helper tables.  It must take no lock that a committer
        could wait for.  Revisions up to the pack tid never change, so it
        need not be one fixed snapshot."""

    def rollback(conn, cursor):
        """End the current transaction, discarding any changes; quiet if
        the connection is already broken."""

    def commit(conn, cursor):
        """Commit the current transaction."""

    def close(conn, cursor, rollback=True):
        """Close the connection, quietly; without ``rollback`` no ROLLBACK
        goes first (the server rolls back what was open when the session
        ends), so that closing never waits for the server."""

    def translate():
        """A context manager that turns driver exceptions into
        relstorage.errors exceptions (lock timeouts into
        CommitLockTimeoutError, lost connections into DisconnectedError)."""


class ISchema(Interface):
    """Creates and checks the tables."""

    def prepare(create):
        """Make sure the database holds the schema of the configured history
        mode and the current schema version, creating it when ``create`` is
        true and the database is empty.  Safe when several processes call it
        at once.  Raises SchemaError when the database holds the other
        history mode, an unknown version, or nothing while ``create`` is
        false."""

    def status():
        """``(version, keep_history)`` of the schema in the database, or
        ``(None, None)``; reads only."""

    def migrate():
        """Apply the migration steps from the database's version to this
        code's, serialised with other runs and with schema creation;
        returns ``(version before, steps applied)``.  SchemaError for a
        database without a schema, a newer one, or the other history
        mode."""

    def zap_all():
        """Delete every object and transaction (for tests and
        ``zodbconvert --clear``), keeping the schema."""

    def drop_all():
        """Drop every table this adapter created."""


class ILocker(Interface):
    """Takes the locks of a commit.  Every wait is bounded by the options'
    commit-lock-timeout and ends in CommitLockTimeoutError."""

    def lock_for_vote(cursor, oids, read_current_oids, staged=True):
        """At tpc_vote, after the pending rows were uploaded (``staged``
        False: they were not; they go to finish_and_commit, see
        ITransactionControl.inline_limit): lock the rows
        of every stored object (``oids``, sorted; in that order, so that two
        committers cannot deadlock) and take shared locks on
        ``read_current_oids``.  On a
        database with one database-wide write lock, take that lock.
        From here until commit or rollback nobody else may change the
        locked objects.

        Returns ``(locked, read_current)``: ``{oid: committed tid}`` of the
        locked rows and of the read-current rows, as the locking statements
        read them (the latest committed, not a snapshot), so that the
        caller needs no further query to find conflicts; objects without a
        row are absent.  Either is None when the locker did not read them.
        """

    def hold_commit_lock(cursor):
        """At tpc_finish: take the commit lock, which serialises choosing a
        transaction id and publishing it (released by commit/rollback).
        Returns ``(last_tid, now)``: the last committed tid and the
        database's clock (seconds since the epoch), read under the lock in
        as few round trips as the database allows."""


class IObjectMover(Interface):
    """Reads object states and moves a commit's pending rows into place."""

    def check_state_size(oid, size):
        """Raise StorageError naming the oid and the server setting if a
        state of ``size`` bytes can never be stored."""

    def load_current(cursor, oid):
        """``(state, tid)`` of the current revision, or None if the object
        does not exist.  ``state`` is None for a deleted object."""

    def load_currents(cursor, oids):
        """``{oid: (state, tid)}`` for those of ``oids`` that exist, in as
        few round trips as the database allows."""

    def load_revision(cursor, oid, tid):
        """The state written by transaction ``tid``, or None."""

    def load_revisions(cursor, revisions):
        """``{(oid, tid): state}`` of those of ``revisions`` (``[(oid,
        tid)]``) that exist, in one round trip where the database allows;
        used where ``LOAD_REVISIONS`` is set (history-preserving)."""

    def load_before(cursor, oid, tid):
        """``(state, start_tid)`` of the newest revision older than
        ``tid``, or None."""

    def next_revision_tid(cursor, oid, tid):
        """The tid of the first revision newer than ``tid``, or None."""

    def exists(cursor, oid):
        """True if any revision of the object is stored."""

    def current_tids(cursor, oids):
        """``{oid: tid}`` of the current revisions of those ``oids`` that
        exist."""

    def clear_temp(cursor):
        """Empty the commit's staging table (called before the commit's
        transaction starts)."""

    def empty_temp(cursor):
        """Empty the staging table inside the current transaction, which
        goes on (a restore batch: the next commit shares it)."""

    def upload_temp(cursor, rows, replace=()):
        """Add pending rows
        ``(oid, prev_tid or None, state or None, data_txn, ord)`` to the
        staging table, in bulk; rows for the oids in ``replace`` (uploaded
        before) replace the earlier ones.  ``prev_tid`` None means "restore:
        do not check for conflicts"."""

    def detect_conflicts(cursor):
        """``[(oid, committed_tid, prev_tid, state)]`` for every staged row
        whose expected previous tid is not the current one."""

    def replace_temp(cursor, oid, prev_tid, state):
        """Replace one staged row's state after conflict resolution."""

    def load_temp(cursor, oid):
        """``(prev_tid, state, data_txn)`` of the staged row for ``oid``, or
        None."""

    def store_superseded(cursor, tid, rows):
        """History-preserving: keep ``(oid, state, data_txn, ord)`` records
        that a restored transaction wrote before a later record of the same
        object, for the iterator only."""

    def move_from_temp(cursor, tid):
        """Publish every staged row as written by ``tid``."""

    def object_count(cursor):
        """How many objects currently exist."""

    def iter_current(cursor, start_oid, limit):
        """``[(oid, tid, state)]`` of current objects from ``start_oid`` on,
        in oid order."""


class IOIDAllocator(Interface):
    """Hands out object ids in blocks, so that new_oid is rarely a round
    trip."""

    def new_oids(cursor, blocks=1):
        """Reserve and return unused oids (ints, ascending): ``blocks``
        blocks of BLOCK where the database can reserve several in one round
        trip, else one.  Runs in its own short transaction that is
        committed even if the caller's commit later fails."""

    def ensure_above(cursor, oid):
        """Inside a commit: make sure the allocator never hands out ``oid``
        or anything below it (after restore() with explicit oids)."""


class IPoller(Interface):
    """Finds what changed between two snapshots."""

    def last_tid(cursor):
        """The tid of the last committed transaction (0 if none); the first
        statement of a snapshot."""

    def changes(cursor, after_tid, last_tid):
        """``[(oid, tid)]`` of objects whose current revision was written
        after ``after_tid`` and no later than ``last_tid``; one indexed
        query."""

    def poll_after_commit(connmanager, after_tid):
        """None, or ``(begin, select, params)`` for
        ITransactionControl.finish_and_commit's ``then``: ``begin`` (no
        parameters, no rows) starts a read snapshot like
        ``connmanager.begin_snapshot`` and ``select``, with ``params``,
        gives the rows of what ``begin_and_poll`` reads (the last tid as
        the row ``(-1, tid)``, see poll.split_poll, and the changes after
        ``after_tid``, none if None).  So a commit's last round trip also
        makes the next poll's snapshot, which the core takes by swapping
        its load and store connections."""

    def begin_and_poll(connmanager, conn, cursor, after_tid,
                       end_previous=False):
        """Start a read snapshot on ``conn`` (``connmanager.begin_snapshot``)
        and return ``(last_tid, changes)``: the snapshot's last tid and, if
        ``after_tid`` is not None, ``changes(cursor, after_tid, last_tid)``
        (else []), in as few round trips as the database allows.
        ``end_previous``: first roll back the transaction ``conn`` is
        still in (the previous snapshot), in the same round trip where the
        database allows."""


class ITransactionControl(Interface):
    """Records committed transactions (the tid is chosen by the core from
    what ILocker.hold_commit_lock reads)."""

    def record_transaction(cursor, tid, user, description, extension,
                           status, seconds=None):
        """Under the commit lock: record that ``tid`` committed (the last-tid
        marker, and in history-preserving mode the transaction's metadata);
        with ``seconds``, also how slow the client's commits are now
        (``commit_row.commit_seconds``, which a pack's watch reads:
        relstorage.pack.watch; PendingTransaction.recorded_seconds).
        """

    finish_and_commit = Attribute(
        "None, or a callable ``(cursor, user, description, extension, "
        "status, rows=None, then=None, before=(), seconds=None) -> tid`` "
        "that runs the whole last step of an "
        "ordinary commit in the database (commit lock, tid from the "
        "database's clock, record, move the staged rows) and commits, in "
        "as few round trips as the database allows.  The core uses it when "
        "no tid was requested and nothing needs the step-by-step path "
        "(restores).  ``rows``, given only where ``inline_limit`` allows: "
        "``[(oid, prev_tid or None, state or None, data_txn)]`` in store "
        "order, the commit's rows, which were not staged.  ``then``, given "
        "only where IPoller.poll_after_commit gave it: ``(begin, select, "
        "params)``, statements that run after the COMMIT in the same round "
        "trip (never when the COMMIT failed); then the callable returns "
        "``(tid, rows of select)``.  ``before``: ``[(sql, params)]`` that "
        "run after the rows are in place and before the COMMIT, in the "
        "same round trip (the JSON mirror's, IMirror.statements).  "
        "``seconds``: how slow this client's commits are now "
        "(PendingTransaction.recorded_seconds), recorded with the tid as "
        "in record_transaction (None: not recorded).")

    finish_restore = Attribute(
        "None, or a callable ``(cursor, tid, user, description, extension, "
        "status, rows=None, before=()) -> tid`` that runs the last step "
        "of a restore "
        "(commit lock, check that ``tid`` follows the last committed tid, "
        "else StorageTransactionError; record, move the staged rows or "
        "``rows`` as for finish_and_commit) in one call, without the "
        "COMMIT: the caller commits, or goes on with a restore batch.  Not "
        "used for restores that carry two records of one object.  "
        "``before`` as for finish_and_commit.")

    inline_limit = Attribute(
        "None, or ``(rows, bytes)``: a commit of at most that many rows and "
        "pickle bytes is not staged; its rows go to finish_and_commit.  "
        "For a database where staging a small commit costs more than "
        "sending its rows with the last step (PostgreSQL truncates its "
        "staging table at every commit that wrote to it; on MySQL staging "
        "is a round trip and the staging table's insert and read).")


class IMirror(Interface):
    """The JSON mirror's rows (``object_json``): written by a commit of a
    client with ``json-state``, after its rows are in place and before
    its COMMIT."""

    def statements(rows, deleted, staged=False):
        """``[(sql, params)]`` that write ``rows`` (``(zoid, module, name,
        JSON text or None)``, each taking the tid of the object's current
        revision) and remove the rows of the zoids ``deleted``; with
        ``staged``, first the rows ``spill`` staged in this transaction,
        which ``rows`` and ``deleted`` override."""

    def spill(cursor, rows, first):
        """Stage ``rows`` (as for ``statements``) in the session's staging
        table, for a commit too large to keep them in memory; ``first``
        for the transaction's first call, which makes the table where it
        is missing and empties it."""


class IHistory(Interface):
    """Queries over past transactions: undo, history and iteration.

    A history-free adapter implements ``transactions``, ``records`` and
    ``object_history`` from the current rows only (one pseudo-transaction
    per tid that still has current objects); its ``undo_log`` is empty and
    ``undoable_records`` is never called.
    """

    def undo_log(cursor, offset, limit):
        """``[(tid, user, description, extension)]``, newest first, of
        undoable transactions."""

    def object_history(cursor, oid, limit):
        """``[(tid, size, user, description, extension)]``, newest first."""

    def undoable_records(cursor, tid):
        """``[(oid, current_tid, before_tid)]`` for every object written by
        ``tid``; ``before_tid`` is the tid of the revision before it (None
        if ``tid`` created the object).  Empty if ``tid`` is unknown or
        packed."""

    def transactions(cursor, start, stop, limit):
        """``[(tid, status, user, description, extension)]`` of
        transactions with ``start <= tid <= stop``, oldest first."""

    def records(cursor, tid):
        """``[(oid, state, data_txn)]`` written by ``tid``, in the order they
        were stored."""


class IBlobMover(Interface):
    """Blob data kept in the database (``shared-blob-dir false``): chunks
    under a blob id, and the row that ties a revision to its blob.  Every
    method streams, holding at most one chunk (or one driver buffer) in
    memory, whatever the blob's size."""

    def check_chunk_size(connmanager, chunk_size):
        """At start-up: raise ConfigurationError naming blob-chunk-size and
        the server setting if a chunk of ``chunk_size`` bytes cannot travel
        in one statement."""

    def upload(cursor, blob_id, path, chunk_size):
        """Store the file ``path`` as the chunks of ``blob_id``, inside the
        commit's transaction; returns its size."""

    def download(cursor, oid, tid, out):
        """Write the blob of revision ``(oid, tid)`` to the file object
        ``out``; returns its size, or None if the revision has no blob.
        StorageError if its chunks do not add up to its size."""

    def copy(cursor, oid, tid, blob_id):
        """Copy the blob of revision ``(oid, tid)``, in the database, as the
        chunks of ``blob_id`` (undo); returns its size, or None if the
        revision has no blob."""

    def publish(cursor, tid, rows):
        """Under the commit lock: tie each ``(oid, blob_id, size)`` of
        ``rows`` to revision ``(oid, tid)``."""

    def drop(cursor, oids):
        """History-free, at vote, with the objects locked: remove the blobs
        of the current revisions of ``oids`` (the commit replaces them)."""

    def orphans(cursor, after, limit):
        """Blob ids, ascending and above ``after``, whose chunks no revision
        refers to any more (a pack removed their revisions)."""

    def delete_chunks(cursor, blob_ids):
        """Remove the chunks of ``blob_ids``."""

    def revisions(cursor, oids):
        """The set of ``(oid, tid)`` revisions stored for ``oids`` (for
        removing the files of the others from a blob directory)."""


class IPacker(Interface):
    """The SQL of packing (driven by relstorage.pack, which documents the
    pipeline; the tables are migration 0003's).  Works on a connection of
    its own: reads in snapshots, each write in a short transaction of its
    own that the caller begins and commits."""

    keep_history = Attribute("Whether the schema keeps history.")

    def try_lock(conn, cursor):
        """Take the database's pack lock without waiting: a function that
        releases it, or None when another pack holds it (or PackError,
        with more to say).  A lock that can be lost (a lease) has a
        ``lost`` attribute, which the pack checks between batches."""

    def prepare_session(cursor):
        """Session settings of the pack's own connection, once it holds
        the pack lock."""

    def oldest_transaction(cursor):
        """The start (seconds since the epoch) of the oldest transaction
        another session of the database has open, or None."""

    # -- references (object_ref, pack_state) --

    def refs_state(cursor):
        """The ``RefsState`` of the analysis, or None (nothing analysed)."""

    def set_refs_state(cursor, state):
        """Record how far the analysis has got."""

    def clear_refs(cursor):
        """Forget every recorded reference."""

    def scan_page(cursor, since, since_zoid, scan_tid, zoid, limit):
        """``[(zoid, tid, state)]``: current revisions after ``(since,
        since_zoid)`` in (tid, zoid) order and up to ``scan_tid``, after
        ``zoid``, by zoid (a first analysis, or many rows written since
        the last one)."""

    def count_current(cursor):
        """How many objects have a current revision."""

    def tail_page(cursor, tid, zoid, up_to, limit):
        """``[(zoid, tid, state)]``: current revisions after ``(tid,
        zoid)`` up to tid ``up_to``, by (tid, zoid)."""

    def kept_unanalysed(cursor, pack_tid, zoid, limit):
        """``[(zoid, tid, state)]``: kept revisions, no longer current,
        whose references are not recorded (history-preserving)."""

    def add_refs(cursor, refs):
        """Record ``(zoid, tid, to_zoid)`` references."""

    def drop_refs(cursor, zoids):
        """Forget the references of ``zoids`` (history-free: their
        revision was replaced)."""

    def add_unreadable(cursor, rows):
        """Record revisions ``(zoid, tid, reason)`` whose references could
        not be read (relstorage.pack.references)."""

    def unreadable(cursor, pack_tid=None):
        """``[(zoid, tid, reason)]``: the stored revisions whose references
        could not be read and that a pack to ``pack_tid`` (None: now)
        needs, not replaced by then; such a pack removes no garbage while
        there is one."""

    # -- one pack's analysis (pack_run, pack_object, pack_reached) --

    def run(cursor):
        """The ``PackRun`` in pack_run, or None."""

    def clear_run(cursor):
        """Empty the analysis tables (the caller's transaction holds
        nothing else)."""

    def base(cursor, earlier, pack_tid):
        """The ``since`` that ``fill`` may use for a pack to ``pack_tid``,
        given ``earlier``, the PackRun in pack_run before this pack's
        analysis (None: a whole ``fill``)."""

    def fill(cursor, pack_tid, since=None):
        """Record in ``pack_object`` every object with a revision at or
        before ``pack_tid``: the newest such revision (``keep_tid``), whether
        its state is a deletion, and whether older revisions exist.  Returns
        how many objects were recorded.  With ``since`` (from ``base``),
        objects unchanged since the finished pack to it are taken as that
        pack left them, without reading their revisions."""

    def seed(cursor, pack_tid):
        """Mark reached, at depth 0, the root and what is written after
        ``pack_tid`` or referred to from there; returns how many."""

    def walk_step(cursor, depth, frontier=None):
        """Mark reached what the objects reached at ``depth`` refer to;
        returns how many (0: the walk is over).  ``frontier``: how many
        objects were reached at ``depth``, when the caller knows (a
        database may choose how to run the step by it)."""

    def rescue(cursor, zoids, depth):
        """Mark reached the objects of ``zoids`` that were not."""

    counts_waiters = Attribute(
        "Whether ``waiters`` tells how many sessions wait for the pack.")

    def waiters(cursor):
        """How many other sessions wait for a lock this session's
        transaction holds (None: the database cannot tell); asked at the
        end of each deletion batch, inside its transaction, without
        failing it."""

    def batch_end(cursor):
        """``(waiters, logged)`` at the end of a batch's transaction, in
        one round trip where the database allows: ``waiters(cursor)`` and
        the position of the database's log in bytes (None where it does
        not tell)."""

    def stop_gc(cursor):
        """The pack in pack_run removes no more garbage from now on."""

    def done(cursor, run):
        """After the analysis tables are emptied, record ``run`` as a pack
        that ran from its analysis to its end without skipping an
        object."""

    # -- deletion --

    by_page = Attribute(
        'Whether old revisions go first in a pass by page (the packer '
        'provides IPagePacker), after which ``doomed`` lists the garbage '
        'only')

    def doomed(cursor, gc, after, limit):
        """``[(zoid, keep_tid, garbage)]`` by zoid after ``after``: the
        objects that go (``garbage``) and the kept ones with older
        revisions (the garbage only, with ``by_page``)."""

    def delete_doomed(cursor, rows, pack_tid):
        """Remove what ``rows`` of ``doomed`` say; returns how many were
        applied.  Never waits for a lock a committer may hold while it
        waits for the pack: garbage whose rows a committer holds is
        skipped (it is being written, so it is no longer garbage).  (At
        most it waits for a committer's last step, which waits for
        nothing the pack holds: MySQL's history-preserving packer.)"""

    def mark_packed(cursor, pack_tid):
        """Mark the transactions up to ``pack_tid`` packed (no undo)."""

    def finish(cursor, pack_tid):
        """Remove the transactions up to ``pack_tid`` left without data."""


class IPagePacker(Interface):
    """A packer whose deletions go first by page (``IPacker.by_page``)."""

    def pages(cursor):
        """The number of pages of object_state."""

    def delete_pages(cursor, first, end):
        """Remove the revisions on pages [first, end) of object_state
        older than their object's kept one, with their references and
        blob rows; returns how many."""
