"""The pack lock as a lease: a row of the table ``lease`` (migration
0004) that names its holder and when it expires, taken on a connection of
its own in autocommit and renewed by a thread while the pack runs.

Where a session's lock cannot serve: a Galera cluster, whose nodes keep
MySQL's GET_LOCK to themselves, and PostgreSQL behind a transaction
pooler, where a session advisory lock would stay with whichever server
session took it.  Each database gives the statements (the server's
clock, its upsert) in a subclass: mysql/pack.py, postgresql/pack.py.
"""
import logging
import threading
import time
import uuid

from relstorage.errors import PackError

log = logging.getLogger(__name__)

#: Seconds a pack's lease lasts unless renewed.  The pack renews it every
#: third of that; a pack that was killed keeps others out that long.
PACK_LEASE = 60


class PackLease:
    """The pack lock: the row ``pack`` of the table ``lease``.  Call the
    lease to give it back; ``lost`` tells whether it expired before that
    (the server out of reach for longer than the lease), in which case
    another pack may have taken it.  Subclasses give ``RENEW`` and
    ``GIVE_BACK`` (parameters: seconds, name, holder; name, holder) and
    ``_take_row``."""

    NAME = 'pack'
    RENEW = None
    GIVE_BACK = 'DELETE FROM lease WHERE name = %s AND holder = %s'

    def __init__(self, connmanager, seconds=PACK_LEASE):
        self.connmanager = connmanager
        self.seconds = seconds
        self.holder = uuid.uuid4().hex
        self.lost = False
        self._conn = None
        self._stop = threading.Event()
        self._thread = None

    def _take_row(self, cursor):
        """Take the row if it is free or expired; ``(holder, seconds
        left)`` of the row as it is then."""
        raise NotImplementedError

    def take(self):
        """Take the lease; raises PackError, naming when it expires, if
        another pack holds it."""
        cm = self.connmanager
        self._conn = cm.connect()
        try:
            holder, remaining = self._take_row(self._conn.cursor())
            if holder != self.holder:
                raise PackError(
                    f'another pack of {cm.describe()} is running; this one '
                    f'did nothing (the other holds the pack lease for '
                    f'{max(0, int(remaining))}s more; one that was killed '
                    f'holds it for at most {self.seconds}s)')
        except BaseException:
            cm.close(self._conn, None)
            self._conn = None
            raise
        self._thread = threading.Thread(
            target=self._renew, name='relstorage pack lease', daemon=True)
        self._thread.start()
        return self

    def _renew(self):
        cm = self.connmanager
        interval = self.seconds / 3
        failing_since = None
        while not self._stop.wait(interval):
            try:
                cursor = self._conn.cursor()
                cursor.execute(self.RENEW,
                               (self.seconds, self.NAME, self.holder))
                renewed = cursor.rowcount == 1
                failing_since = None
            except cm.driver.Error as e:
                log.warning('could not renew the pack lease: %s', e)
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since < self.seconds - interval:
                    self._reconnect()
                    continue
                renewed = False
            if not renewed:
                self.lost = True
                log.error('the pack lost its lease on %s: another pack may '
                          'run now; this one stops at its next batch',
                          cm.describe())
                return

    def _reconnect(self):
        cm = self.connmanager
        try:
            cm.close(self._conn, None)
            self._conn = cm.connect()
        except Exception as e:  # noqa: BLE001 (tried again at the next)
            log.warning('could not reconnect to renew the pack lease: %s', e)

    def __call__(self):
        """Give the lease back."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        cm = self.connmanager
        try:
            if not self.lost:
                self._conn.cursor().execute(self.GIVE_BACK,
                                            (self.NAME, self.holder))
        finally:
            cm.close(self._conn, None)
