"""A child-process program for tests/test_sync_standby.py (not a test
module).

Run as ``python tests/standby_worker.py CONFIG_FILE NAME SEED [PAD]``, where
CONFIG_FILE holds the ZConfig text of a ``<relstorage>`` section.  It
speaks as tests/workers.py's commands do (JSON lines on stdout, words on
stdin; see tests/children.py).

Says ``ready`` once the database is open, waits for ``go``, then commits
increments until stdin says ``stop`` (or closes), or DEADLINE seconds
passed.  Every attempt has a number of its own (0, 1, 2, ...): it adds 1
to one of the ``workers.Counter`` objects of the list
``root['counters']``, chosen at random (seeded by SEED and NAME), and
records the counter's index under the attempt's number in
``root['logs'][NAME]`` (an OOBTree), in the same transaction.  So the
database shows which attempts were committed, and each counter equals the
number of entries naming it.  With PAD (bytes, default 0) each attempt
also rewrites ``root['pads'][NAME]``, the writer's own
``workers.Counter``, with PAD random bytes: a bigger commit, whose last
step takes the server longer.

The outcome of every attempt is said as soon as it is known, with the
time it was known (``at``, ``time.time()``):

- ``acked`` (``attempt``, ``counter``): ``commit()`` returned;
- ``unknown`` (``attempt``, ``counter``, ``error``): the storage raised
  CommitOutcomeUnknownError;
- ``failed`` (``attempt``, ``kind``, ``error``, ``clean``): anything else,
  after which the next attempt follows (after FAILED_PAUSE seconds, so
  that a writer does not spin while no server takes commits).  ``kind``
  is the exception's ``module.Class``; ``clean`` says whether it is one
  of ZODB's or relstorage's errors (a POSError or a TransientError), and
  where it is not, ``traceback`` holds the whole traceback.

Ends with a ``result`` event (the attempts, and the seconds taken).
"""
import os
import queue
import random
import sys
import threading
import time
import traceback

#: Seconds after which the writer stops starting attempts.
DEADLINE = 60

#: Seconds slept after an attempt that failed.
FAILED_PAUSE = 0.02


def _clean(error):
    """Whether ``error`` is one of the errors the storage is meant to
    raise: ZODB's POSError family (relstorage's errors are StorageErrors)
    or a TransientError; a driver's own exception is not."""
    from transaction.interfaces import TransientError
    from ZODB.POSException import POSError
    return isinstance(error, (POSError, TransientError))


def run(config_path, name, seed, pad='0'):
    import transaction
    import ZODB
    from relstorage.errors import CommitOutcomeUnknownError

    import workers

    rng = random.Random(f'{seed}/{name}')
    pad = int(pad)
    db = ZODB.DB(workers.open_storage(config_path))
    tm = transaction.TransactionManager(explicit=True)
    conn = db.open(tm)
    words = queue.Queue()

    def listen():
        while True:
            word = workers.read_command()
            words.put(word)
            if word in ('', 'stop'):
                return
    try:
        with tm:
            size = len(conn.root()['counters'])
            assert len(conn.root()['logs'][name]) == 0, 'log not empty'
        workers.emit('ready', name=name, pid=os.getpid())
        workers.wait_for_go()
        threading.Thread(target=listen, daemon=True).start()
        started = time.monotonic()
        attempt = 0
        while words.empty() and time.monotonic() - started < DEADLINE:
            which = rng.randrange(size)
            try:
                tm.begin()
                root = conn.root()
                root['counters'][which].value += 1
                root['logs'][name][attempt] = which
                if pad:
                    root['pads'][name].value = os.urandom(pad)
                tm.commit()
            except CommitOutcomeUnknownError as e:
                tm.abort()
                workers.emit('unknown', attempt=attempt, counter=which,
                             at=time.time(),
                             error=str(e).splitlines()[0][:300])
            except Exception as e:
                said = traceback.format_exc()
                try:
                    tm.abort()
                except Exception:
                    said += '\n(and the abort after it:)\n' + (
                        traceback.format_exc())
                fields = dict(attempt=attempt, at=time.time(),
                              kind=f'{type(e).__module__}.'
                                   f'{type(e).__name__}',
                              error=str(e).splitlines()[0][:300]
                              if str(e) else '', clean=_clean(e))
                if not fields['clean']:
                    fields['traceback'] = said
                workers.emit('failed', **fields)
                time.sleep(FAILED_PAUSE)
            else:
                workers.emit('acked', attempt=attempt, counter=which,
                             at=time.time())
            attempt += 1
        workers.emit('result', name=name, attempts=attempt,
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
