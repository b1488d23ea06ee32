"""Filling the JSON mirror in for what commits did not write: a database
from before ``json-state``, or commits of clients without it
(``relstorage-mirror``).

In batches, in zoid order: the current revisions whose mirror row is
missing or of another revision are read in a snapshot of their own, then
rendered with no transaction open, then written in a short write
transaction, each row only where its revision is still the object's
current one (``IMirror.fill``).  So other clients go on writing: a
commit that replaces an object meanwhile writes its own row (with
json-state) or leaves one for the next run.  Nothing is kept between
runs but the mirror itself: a run stopped at a batch boundary (Ctrl-C)
and started again reads only what is still missing.  At the end, the
rows of objects that no longer have a state are removed.

Works on the adapter's roles only (the connection manager and the mirror
role); imports nothing but the base.
"""
import time

from relstorage.mirror.render import render

#: Revisions read, rendered and written per batch.
BATCH = 500


def fill(adapter, batch=BATCH, progress=None):
    """Fill the mirror of ``adapter``'s database in; returns a dict of
    counts: ``rendered`` (rows written), ``unrendered`` (of them, states
    that could not be rendered: a null), ``orphans`` (rows removed),
    ``seconds``.  ``progress`` (relstorage.progress.Progress) hears of
    each batch, and its ``stop_requested()``, asked between batches, ends
    the run early (``stopped`` true in the counts)."""
    cm, mirror = adapter.connmanager, adapter.mirror
    started = time.monotonic()
    counts = {'rendered': 0, 'unrendered': 0, 'orphans': 0,
              'stopped': False}
    conn, cursor = cm.connect(), None
    try:
        cursor = conn.cursor()
        total = _in_transaction(cm, conn, cursor, False,
                                lambda: mirror.count(cursor))
        behind = total[0] - total[2]
        if progress is not None:
            progress.phase('objects whose JSON is missing or behind',
                           behind)
        after = -1
        while True:
            if progress is not None and progress.stop_requested():
                counts['stopped'] = True
                break
            revisions = _in_transaction(
                cm, conn, cursor, False,
                lambda: mirror.behind(cursor, after, batch))  # noqa: B023
            if not revisions:
                break
            rows = []
            for zoid, tid, state in revisions:
                found = render(state)
                if found.error is not None:
                    counts['unrendered'] += 1
                rows.append((zoid, tid, found.module, found.name,
                             found.json))
            _in_transaction(cm, conn, cursor, True,
                            lambda: mirror.fill(cursor, rows))  # noqa: B023
            counts['rendered'] += len(rows)
            after = revisions[-1][0]
            if progress is not None:
                progress.add(len(rows), unrendered=(
                    len(rows) - sum(1 for row in rows if row[4] is not None)))
        if not counts['stopped']:
            counts['orphans'] = _in_transaction(
                cm, conn, cursor, True,
                lambda: mirror.orphans(cursor, delete=True))
        if progress is not None:
            progress.end_phase()
    finally:
        if cursor is not None:
            cm.close(conn, cursor)
        else:
            conn.close()
    counts['seconds'] = time.monotonic() - started
    return counts


def check(adapter):
    """What the mirror lacks, without writing: ``objects`` (with a
    state), ``rows``, ``current`` (rows of the current revision),
    ``behind`` (objects whose row is missing or of an older revision)
    and ``orphans`` (rows of objects without a state)."""
    cm, mirror = adapter.connmanager, adapter.mirror
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        def read():
            objects, rows, current = mirror.count(cursor)
            return {'objects': objects, 'rows': rows, 'current': current,
                    'behind': objects - current,
                    'orphans': mirror.orphans(cursor)}
        return _in_transaction(cm, conn, cursor, False, read)
    finally:
        cm.close(conn, cursor)


def _in_transaction(cm, conn, cursor, writing, apply):
    """``apply()`` in a transaction of its own: a write transaction,
    committed, or a snapshot, rolled back."""
    with cm.translate('filling the JSON mirror'):
        if writing:
            cm.begin_write(cursor, 'filling the JSON mirror')
        else:
            cm.begin_analysis(conn, cursor)
        try:
            result = apply()
        except BaseException:
            cm.rollback(conn, cursor)
            raise
        if writing:
            cm.commit(conn, cursor)
        else:
            cm.rollback(conn, cursor)
        return result
