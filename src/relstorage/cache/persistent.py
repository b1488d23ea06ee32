"""The persistent local cache (``cache-local-dir``).

On close the root storage writes its shared cache to a file in
``cache-local-dir``; on open it reads the file back and keeps only what is
still current: one query for the oids changed since the file's horizon,
plus one query that checks a sample of the remaining entries, which catches
a file that belongs to a database recreated at the same address.  A file
that is missing, damaged or of another database is ignored (with a warning
for the last two): the cache then simply starts cold.
"""
import hashlib
import logging
import os
import random
import struct
import time
import zlib

from relstorage.cache.file import open_file

log = logging.getLogger(__name__)

#: Entries whose current tid is checked against the database at start-up,
#: drawn from the file's first SAMPLE_FROM.
SAMPLE = 100
SAMPLE_FROM = 10000


def identity(storage):
    """What names the database in the file: the adapter's description
    (never a password) and the history mode."""
    mode = 'hp' if storage._options.keep_history else 'hf'
    return f'{storage._adapter.describe()} {mode}'


def path_for(storage):
    name = hashlib.sha256(identity(storage).encode('utf-8')).hexdigest()
    return os.path.join(storage._options.cache_local_dir,
                        f'relstorage-{name[:20]}.cache')


def load(storage):
    """Fill the root storage's cache from its file, if there is one."""
    path = path_for(storage)
    started = time.monotonic()
    found = open_file(path, identity(storage))
    if found is None:
        return 0
    saved = found.horizon
    adapter = storage._adapter
    cm = adapter.connmanager
    usable = True
    conn, cursor = cm.open_load()
    try:
        cm.begin_snapshot(conn, cursor)
        current = adapter.poller.last_tid(cursor)
        changed = set()
        if current >= saved:
            changed = {oid for oid, _ in adapter.poller.changes(
                cursor, saved, current)}
            # Drawn from the most valuable entries (the file's first): a
            # file of another database differs in any of them.
            kept = [(oid, tid) for oid, tid, _ in found.records(SAMPLE_FROM)
                    if oid not in changed]
            sample = random.sample(kept, min(SAMPLE, len(kept)))
            if sample:
                now = adapter.mover.current_tids(
                    cursor, [oid for oid, _ in sample])
                # Gone (a pack collected it): drop it.  Another revision
                # without a change since the horizon: the file is not of
                # this database.
                changed.update(oid for oid, _ in sample if oid not in now)
                stale = [oid for oid, tid in sample
                         if oid in now and now[oid] != tid]
                if stale:
                    log.warning(
                        'the local cache file %s does not match the database '
                        '(%d of %d sampled objects differ); not using it',
                        path, len(stale), len(sample))
                    usable = False
    except (ValueError, struct.error, zlib.error) as e:
        log.warning('Ignoring persistent cache file %s: %s', path, e)
        return 0
    finally:
        cm.close(conn, cursor)
    try:
        if usable:
            restored = storage._cache.restore_file(found, current, changed)
        else:
            restored = storage._cache.restore(saved, (), current, changed)
    except (ValueError, struct.error, zlib.error) as e:
        log.warning('Ignoring persistent cache file %s: %s', path, e)
        return 0
    log.info('local cache: %d of %d objects read back from %s in %.2fs '
             '(%d changed since it was written)', restored, found.count,
             path, time.monotonic() - started, len(changed))
    return restored


def save(storage):
    """Write the root storage's cache to its file; failures are logged,
    never raised (closing must not fail because of the cache)."""
    path = path_for(storage)
    try:
        # Private: the file holds object states.
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        count = storage._cache.save(path, identity(storage))
    except (OSError, ValueError) as e:
        log.warning('cannot write the local cache to %s: %s', path, e)
        return 0
    log.info('local cache: %d objects written to %s', count, path)
    return count
