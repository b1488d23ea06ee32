"""Child program of tests/test_gevent.py (not a test module): many
greenlets in one gevent-patched process committing and reading through one
relstorage.

    python tests/gevent_worker.py CONFIG_FILE GREENLETS COMMITS TIMEOUT

Patches everything first (``gevent.monkey.patch_all()``), and for psycopg2
installs psycogreen's wait callback (what an application does), then opens
the ``<relstorage>`` section of CONFIG_FILE.  Each greenlet has its own
connection and transaction manager and runs COMMITS transactions: it
increments its own counter, adds one to a shared ``BTrees.Length`` (whose
conflicts ZODB resolves) and reads every other greenlet's counter, which
must never go backwards.  Prints one JSON line of results; exit status 3
when the greenlets did not all finish within TIMEOUT seconds (a deadlock),
4 when a result is wrong.
"""
from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402


def main():
    config_file, greenlets, commits, timeout = sys.argv[1:5]
    greenlets, commits, timeout = int(greenlets), int(commits), float(timeout)
    with open(config_file, encoding='utf-8') as f:
        config = f.read()
    if '<postgresql>' in config and 'driver psycopg\n' not in config:
        from psycogreen.gevent import patch_psycopg
        patch_psycopg()
    import transaction
    import ZODB
    import ZODB.config
    from BTrees.Length import Length
    from persistent.mapping import PersistentMapping

    storage = ZODB.config.storageFromString(config)
    db = ZODB.DB(storage, pool_size=greenlets + 2)
    with db.transaction() as conn:
        root = conn.root()
        root['total'] = Length()
        for i in range(greenlets):
            root[f'g{i}'] = PersistentMapping(n=0)

    state = {'in_flight': 0, 'max_in_flight': 0, 'retries': 0,
             'backwards': 0, 'reads': 0}

    def work(i):
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        seen = {}
        try:
            for _ in range(commits):
                for attempt in tm.attempts(20):
                    with attempt:
                        root = conn.root()
                        root[f'g{i}']['n'] += 1
                        root['total'].change(1)
                        for j in range(greenlets):
                            n = root[f'g{j}']['n']
                            state['reads'] += 1
                            if n < seen.get(j, 0):
                                state['backwards'] += 1
                            seen[j] = n
                        state['in_flight'] += 1
                        state['max_in_flight'] = max(state['max_in_flight'],
                                                     state['in_flight'])
                        try:
                            tm.commit()
                        except Exception:
                            state['retries'] += 1
                            raise
                        finally:
                            state['in_flight'] -= 1
        finally:
            tm.abort()
            conn.close()

    started = time.monotonic()
    jobs = [gevent.spawn(work, i) for i in range(greenlets)]
    done = gevent.joinall(jobs, timeout=timeout)
    seconds = time.monotonic() - started
    failed = [str(job.exception) for job in jobs if job.exception]
    result = {'greenlets': greenlets, 'finished': len(done),
              'failed': failed[:3], 'seconds': round(seconds, 2), **state}
    if len(done) < greenlets:
        # Where each greenlet waits, for the test's message.
        from gevent.util import format_run_info
        sys.stderr.write('\n'.join(format_run_info()))
        print(json.dumps(result), flush=True)
        return 3
    with db.transaction() as conn:
        root = conn.root()
        result['total'] = root['total']()
        result['counters'] = sorted({root[f'g{i}']['n']
                                     for i in range(greenlets)})
    db.close()
    print(json.dumps(result), flush=True)
    ok = (not failed and result['total'] == greenlets * commits
          and result['counters'] == [commits] and not state['backwards'])
    return 0 if ok else 4


if __name__ == '__main__':
    sys.exit(main())
