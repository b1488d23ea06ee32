"""Reopening a connection the database dropped, where that is safe."""
import logging

from relstorage.errors import DisconnectedError

log = logging.getLogger(__name__)


def retry_if_disconnected(connmanager, what, operation, drop,
                          may_retry=lambda: True):
    """Run ``operation()`` with driver errors translated; if the connection
    turns out to be gone, ``drop()`` it and run the operation once more
    (``operation`` opens a new connection when there is none).  Where
    ``may_retry()`` is false (inside a commit) the DisconnectedError is
    raised at once and the connection is left to the commit's abort."""
    for attempt in (1, 2):
        try:
            with connmanager.translate(what):
                return operation()
        except DisconnectedError:
            if not may_retry():
                raise
            drop()
            if attempt == 2:
                raise
            log.info('%s: the database dropped the connection; reconnecting',
                     what)
