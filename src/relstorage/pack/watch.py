"""How long other clients' commits take while the pack deletes: the
measure behind the throttle's pauses where no lock is waited for
(relstorage.pack.throttle).

A batch of deletions holds no lock a committer takes, yet it can make a
commit slow: the commit's flush of the log waits behind the batch's
(PostgreSQL's WAL, InnoDB's redo), and the batch takes the server's CPUs
and disks, which a writer on the same machine shares with its own
process.  Neither the commit's statements nor its transaction on the
server show all of that (measured: docs/performance.rst, "The throttle
that pauses only when a writer waits"); the writer's own clock does.
Every ordinary commit records, with the tid it moves in ``commit_row``,
how slow its client's commits are: the longer of its own time from
tpc_begin to its last step and the whole time of the client's previous
commit if that ended within the last second (its last round trip, whose
COMMIT waits for the log, can only be recorded by a later commit:
PendingTransaction.recorded_seconds).  A thread with a connection
of its own reads that row every INTERVAL seconds
(``Packer.last_commit``), keeping the seconds of each new tid until asked
(``take``).  Commits closer together than INTERVAL are sampled: the last
of them is seen.  Where the thread cannot connect or read, ``take`` says
None and the throttle goes by what it knew before.
"""
import logging
import threading

log = logging.getLogger(__name__)

#: Seconds between two looks: about a commit's time on a quiet server.
INTERVAL = 0.02


class Watch:

    def __init__(self, cm, packer):
        self._cm, self._packer = cm, packer
        self._lock = threading.Lock()
        self._seen = []
        self._known = True
        self._stop = threading.Event()
        self._thread = None

    @classmethod
    def started(cls, cm, packer):
        """A Watch that runs, or None where it cannot (no connection is to
        be had, or the commit row cannot be read)."""
        watch = cls(cm, packer)
        try:
            conn = cm.connect()
        except Exception as e:  # noqa: BLE001 - the pack goes on without
            log.debug('pack: no connection for the watch: %s', e)
            return None
        cursor = conn.cursor()
        try:
            tid, _ = watch._ask(conn, cursor)
        except Exception as e:  # noqa: BLE001 - the pack goes on without
            log.debug('pack: the watch cannot read the commit row: %s', e)
            cm.close(conn, cursor)
            return None
        watch._thread = threading.Thread(
            target=watch._run, args=(conn, cursor, tid), daemon=True,
            name='relstorage-pack-watch')
        watch._thread.start()
        return watch

    def _ask(self, conn, cursor):
        found = self._packer.last_commit(cursor)
        # (Each look in a transaction of its own: a new snapshot.)
        self._cm.rollback(conn, cursor)
        return found

    def _run(self, conn, cursor, last):
        try:
            while not self._stop.wait(INTERVAL):
                tid, seconds = self._ask(conn, cursor)
                if tid != last and seconds is not None:
                    with self._lock:
                        self._seen.append(seconds)
                last = tid
        except Exception as e:  # noqa: BLE001 - the pack goes on without
            log.debug('pack: the watch stopped: %s', e)
            self._known = False
        finally:
            try:
                self._cm.close(conn, cursor)
            except Exception:  # noqa: BLE001 - closing a broken one
                pass

    def take(self):
        """The seconds of the commits seen since the last call (a list,
        empty when none was), or None when the watch stopped telling."""
        with self._lock:
            seen, self._seen = self._seen, []
        return seen if self._known else None

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
