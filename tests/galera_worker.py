"""A child-process program for tests/test_galera.py (not a test module).

Run as ``python tests/galera_worker.py CONFIG_FILE NAME N SEED [PAD
[PAUSE]]``,
where CONFIG_FILE holds the ZConfig text of a ``<relstorage>`` section
that opens the database through one Galera node.  It speaks as
tests/workers.py's commands do (JSON lines on stdout, ``go`` on stdin; see
tests/children.py).

Says ``ready`` once the database is open, waits for ``go``, then runs N
transactions, each adding 1 to one of the ``workers.Counter`` objects in
the list ``root['counters']``, chosen at random (seeded by SEED and NAME),
and committing.  With PAD (bytes, default 0) each transaction also
rewrites ``root['pads'][NAME]``, the writer's own ``workers.Counter``, with
PAD random bytes: bigger commits.  With PAUSE (seconds, default 0) it
waits that long after each acknowledged increment, so that a run lasts
long enough for a node to be killed in its middle.  A transaction that raises anything (a
ConflictError, a lock or disconnection error, a POSKeyError) is aborted
and tried again, up to ATTEMPTS times; then that increment is given up.
Only an increment whose ``commit()`` returned counts as acknowledged.

Ends with a ``result`` event: the acknowledged increments per counter
(``acked``), those whose outcome the storage could not tell
(CommitOutcomeUnknownError, ``unknown``), the increments given up, and the
errors seen, counted per ``Class: message`` (oids, tids, times and numbers
replaced, so that alike errors count together), with one full example of
each class.
"""
import os
import random
import re
import sys
import time

#: Attempts of one increment before it is given up.
ATTEMPTS = 40

#: Seconds after which the worker stops starting new increments.
DEADLINE = 75


def _kind(error):
    """``Class: message`` with the oids, tids, times and numbers of the
    message's first line replaced, so that alike errors count together."""
    text = str(error).splitlines()[0] if str(error) else ''
    text = re.sub(r'0x[0-9a-fA-F]+', '0x?', text)
    text = re.sub(r'\d{4}-\d\d-\d\d[ T][\d:.]+', 'TIME', text)
    text = re.sub(r'\d+', '#', text)
    return f'{type(error).__name__}: {text[:200]}'


def run(config_path, name, count, seed, pad='0', pause='0'):
    import transaction
    import ZODB
    from relstorage.errors import CommitOutcomeUnknownError

    import workers

    count = int(count)
    pad = int(pad)
    pause = float(pause)
    rng = random.Random(f'{seed}/{name}')
    db = ZODB.DB(workers.open_storage(config_path))
    tm = transaction.TransactionManager(explicit=True)
    conn = db.open(tm)
    try:
        with tm:
            size = len(conn.root()['counters'])
        workers.emit('ready', name=name, pid=os.getpid())
        workers.wait_for_go()
        acked = [0] * size
        unknown = [0] * size
        errors = {}
        examples = {}
        attempts = given_up = 0
        started = time.monotonic()
        for _ in range(count):
            if time.monotonic() - started > DEADLINE:
                break
            which = rng.randrange(size)
            for _ in range(ATTEMPTS):
                attempts += 1
                try:
                    tm.begin()
                    counter = conn.root()['counters'][which]
                    counter.value += 1
                    if pad:
                        # A bigger commit: the writer's own object, which
                        # no other writer changes, rewritten each time.
                        mine = conn.root()['pads'][name]
                        mine.value = os.urandom(pad)
                    tm.commit()
                except CommitOutcomeUnknownError as e:
                    tm.abort()
                    unknown[which] += 1
                    kind = _kind(e)
                    errors[kind] = errors.get(kind, 0) + 1
                    examples.setdefault(type(e).__name__, str(e)[:500])
                    break
                except Exception as e:
                    tm.abort()
                    kind = _kind(e)
                    errors[kind] = errors.get(kind, 0) + 1
                    examples.setdefault(type(e).__name__, str(e)[:500])
                    time.sleep(0.005 * rng.random())
                    continue
                acked[which] += 1
                if pause:
                    time.sleep(pause)
                break
            else:
                given_up += 1
        workers.emit('result', name=name, acked=acked, unknown=unknown,
                     given_up=given_up, attempts=attempts, errors=errors,
                     examples=examples,
                     seconds=round(time.monotonic() - started, 2))
    finally:
        try:
            conn.close()
        finally:
            db.close()


if __name__ == '__main__':
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import workers
    workers.start_watchdog()
    run(*sys.argv[1:])
