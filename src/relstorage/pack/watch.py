"""How long other clients' statements run while the pack deletes: the
measure behind the throttle's pauses where no lock is waited for
(relstorage.pack.throttle).

A batch of deletions holds no lock a committer takes, yet it can make a
commit slow: the commit's flush of the log waits behind the batch's
(PostgreSQL's WAL, InnoDB's redo), and both share the server's CPUs and
disks.  The database shows it: a thread with a connection of its own asks
it, every INTERVAL seconds, for how long the longest statement of another
client session of the same database has been running
(``Packer.slowest_statement``; on PostgreSQL a commit under way counts
from its transaction's start, between its statements too: a commit made
slower a little at every step, as when the pack takes the server's CPUs,
shows only whole), and keeps the longest seen until asked (``take``).
Where the database cannot tell (SQLite, MySQL), or the thread cannot
connect or ask, ``take`` says None and the throttle goes by what it knew
before.
"""
import logging
import threading

log = logging.getLogger(__name__)

#: Seconds between two looks: shorter than the commits worth seeing.
INTERVAL = 0.02


class Watch:

    def __init__(self, cm, packer, exclude):
        self._cm, self._packer = cm, packer
        self._exclude = tuple(exclude)
        self._lock = threading.Lock()
        self._longest = 0.0
        self._known = True
        self._stop = threading.Event()
        self._thread = None

    @classmethod
    def started(cls, cm, packer, exclude):
        """A Watch that runs, or None where it cannot (the database does
        not tell, or no connection is to be had)."""
        watch = cls(cm, packer, exclude)
        try:
            conn = cm.connect()
        except Exception as e:  # noqa: BLE001 - the pack goes on without
            log.debug('pack: no connection for the watch: %s', e)
            return None
        cursor = conn.cursor()
        try:
            known = watch._ask(conn, cursor) is not None
        except Exception as e:  # noqa: BLE001 - the pack goes on without
            log.debug('pack: the watch cannot ask: %s', e)
            known = False
        if not known:
            cm.close(conn, cursor)
            return None
        watch._thread = threading.Thread(
            target=watch._run, args=(conn, cursor), daemon=True,
            name='relstorage-pack-watch')
        watch._thread.start()
        return watch

    def _ask(self, conn, cursor):
        seconds = self._packer.slowest_statement(cursor, self._exclude)
        # (Each look in a transaction of its own: PostgreSQL keeps one
        # view of its statistics per transaction.)
        self._cm.rollback(conn, cursor)
        return seconds

    def _run(self, conn, cursor):
        try:
            while not self._stop.wait(INTERVAL):
                seconds = self._ask(conn, cursor)
                if seconds is None:
                    self._known = False
                    return
                with self._lock:
                    if seconds > self._longest:
                        self._longest = seconds
        except Exception as e:  # noqa: BLE001 - the pack goes on without
            log.debug('pack: the watch stopped: %s', e)
            self._known = False
        finally:
            try:
                self._cm.close(conn, cursor)
            except Exception:  # noqa: BLE001 - closing a broken one
                pass

    def take(self):
        """The longest time (seconds) a statement of another client was
        seen running since the last call, or None when the watch stopped
        telling."""
        with self._lock:
            longest, self._longest = self._longest, 0.0
        return longest if self._known else None

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
