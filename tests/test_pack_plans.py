"""The plans PostgreSQL makes for a pack's deletion batches on tables
without statistics (a database just filled: zodbconvert, before any
ANALYZE, and always where autovacuum is off).  Each batch addresses a few
hundred objects' rows by key and must reach them by key: a plan that
scans a whole table costs the table's size per batch.  (At 10,000,000
objects on PostgreSQL 15 the garbage's batches took 20 s each when the
planner went through ``object_state_tid`` for ``tid <= pack tid``, which
every row meets: docs/performance.rst, "Ten million objects".)"""
import pytest
import ZODB

from backends import query
from backends import write
from test_pack import _build

#: Indexes on tid alone: a deletion by object that uses one reads them all.
TID_INDEXES = ('object_state_tid', 'current_object_tid')


def _forget_statistics(storage):
    """Make the tables look just filled: no column statistics, no row
    count from an earlier ANALYZE or VACUUM (the tests' role is a
    superuser)."""
    tables = [oid for (oid,) in query(storage, """
        SELECT oid FROM pg_class
        WHERE relname IN ('object_state', 'current_object', 'object_ref',
                          'object_blob')
          AND relnamespace = 'public'::regnamespace""")]
    write(storage, 'DELETE FROM pg_statistic WHERE starelid = ANY(%s)',
          (tables,))
    write(storage, 'UPDATE pg_class SET reltuples = -1 WHERE oid = ANY(%s)',
          (tables,))


def _plans(storage, statements, params, batch=True):
    """The text of each statement's plan (nothing is run): with ``batch``,
    as a deletion batch's transaction plans it (the packer's BATCH_PLAN
    first), else as the pack's session plans a read of its own."""
    cm = storage._adapter.connmanager
    conn = cm.connect()
    cursor = conn.cursor()
    try:
        if batch:
            cm.begin_write(cursor, 'packing')
            cursor.execute(storage._adapter.packer.BATCH_PLAN)
        plans = []
        for statement in statements:
            cursor.execute('EXPLAIN ' + statement, params)
            plans.append('\n'.join(row[0] for row in cursor.fetchall()))
        return plans
    finally:
        cm.rollback(conn, cursor)
        cm.close(conn, cursor)


@pytest.fixture
def unanalysed(open_storage, backend):
    """A PostgreSQL storage holding a little history (400 mappings, half of
    them garbage), its tables without statistics."""
    if not backend.name.startswith('postgresql'):
        pytest.skip('PostgreSQL plans')
    storage = open_storage()
    db = ZODB.DB(storage)
    _build(db, 400)
    _forget_statistics(storage)
    yield storage
    db.close()


@pytest.mark.parametrize('zoids', [20, 500, 5000])
def test_postgresql_removes_garbage_by_key_without_statistics(
        unanalysed, zoids):
    statements = unanalysed._adapter.packer.DELETE_GARBAGE
    plans = _plans(unanalysed, statements,
                   (list(range(1, 2 * zoids, 2)), 2**62))
    assert len(plans) == len(statements) >= 3
    for statement, plan in zip(statements, plans):
        assert 'Seq Scan' not in plan, (statement, plan)
        assert not any(index in plan for index in TID_INDEXES), (
            statement, plan)
        # Each table's rows are reached through its primary key.
        assert '_pkey' in plan, (statement, plan)


@pytest.mark.parametrize('zoids', [20, 500])
def test_postgresql_sweeps_blob_files_by_key_without_statistics(
        unanalysed, zoids):
    """After a pack, the blob directory's files are checked against the
    revisions of their objects, a few hundred objects at a time: by key."""
    [plan] = _plans(unanalysed, [unanalysed._adapter.blobs.REVISIONS],
                    (list(range(1, 2 * zoids, 2)),), batch=False)
    assert 'Seq Scan on object_state' not in plan, plan
    assert 'object_state_pkey' in plan, plan


@pytest.mark.parametrize('limit', [10, 2000])
def test_postgresql_catches_up_through_the_tid_index_without_statistics(
        unanalysed, limit):
    """The references' catch-up reads the revisions of one tid after a
    zoid, a page in zoid order, while the pack goes on (every few seconds
    in the deletions).  Without statistics the planner takes ``tid = X``
    for 0.5 % of the rows and, once that is more than the page, walked
    the primary key from the zoid on, filtering on the tid: at 10,000,000
    objects 1.0 s a call in parallel workers, for a row or two, and the
    writers it slowed kept the pack's throttle pausing.  The rows of the
    tid come first, through the index on tid.  (200,000 more rows make
    the table large enough for the walk to be the planner's choice.)"""
    packer = unanalysed._adapter.packer
    table = 'current_object' if packer.keep_history else 'object_state'
    columns, values = (('zoid, tid', 'g, g') if packer.keep_history
                       else ('zoid, tid, state_size', 'g, g, 0'))
    write(unanalysed, f'INSERT INTO {table} ({columns}) '
          f'SELECT {values} FROM generate_series(1000000, 1199999) g')
    _forget_statistics(unanalysed)
    [plan] = _plans(unanalysed, [packer._sql(packer.TAIL_SAME)],
                    (1100000, 0, limit), batch=False)
    assert f'{table}_tid' in plan, plan
    assert f'Index Scan using {table}_pkey on {table}' not in plan, plan
