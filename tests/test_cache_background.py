"""A large persistent cache file read back in the background.

A file of more than ``BACKGROUND_BYTES`` is read back by a thread after
the storage opened (relstorage.cache.persistent): the process serves
requests meanwhile, polls move the cache's horizon on, others commit, and
what the thread puts in must still be current through that horizon.
"""
import os
import threading

import pytest
import ZODB

from relstorage.cache import persistent as persistentcache

from test_cache import _commit_value, _stats, _value


@pytest.fixture
def background(monkeypatch):
    """Every file read back in the background, three entries a step."""
    monkeypatch.setattr(persistentcache, 'BACKGROUND_BYTES', 0)
    monkeypatch.setattr(persistentcache, 'STEP', 3)


def _written(open_storage, directory, count=20):
    """A database of ``count`` objects and a cache file holding them."""
    storage = open_storage(cache_local_dir=directory)
    db = ZODB.DB(storage)
    oids = [_commit_value(db, f'k{i}', i) for i in range(count)]
    db.close()
    path = persistentcache.path_for(storage)
    assert os.path.exists(path)
    return oids, path


def test_the_file_is_read_back_after_the_storage_opened(
        open_storage, tmp_path, background):
    directory = str(tmp_path / 'cache')
    oids, _ = _written(open_storage, directory)
    again = open_storage(cache_local_dir=directory)
    assert again._cache_warmer is not None
    assert persistentcache.wait(again, 10) >= 20
    reader = again.new_instance()
    reader.poll_invalidations()
    hits = _stats(again)['hits']
    assert [_value(reader, oid)[0] for oid in oids] == list(range(20))
    assert _stats(again)['hits'] - hits == 20
    reader.release()


def test_what_changes_while_it_is_read_back_is_not_served_stale(
        open_storage, tmp_path, monkeypatch, background):
    """Between two steps another client commits and this process polls
    (its cache's horizon moves past the thread's snapshot): the thread
    asks what changed up to the new horizon and leaves it out, and what it
    puts in afterwards serves the snapshots after that poll."""
    directory = str(tmp_path / 'cache')
    oids, _ = _written(open_storage, directory)
    paused, resume = threading.Event(), threading.Event()
    steps = []

    def before_step(warmer):
        steps.append(1)
        if len(steps) == 2:
            paused.set()
            assert resume.wait(10)
    monkeypatch.setattr(persistentcache.Warmer, 'before_step', before_step)
    other = ZODB.DB(open_storage())
    again = open_storage(cache_local_dir=directory)
    try:
        assert paused.wait(10)
        # Whichever of the two the thread put in already, the poll
        # freezes; the thread must leave the others out.
        for i in (0, 19):
            _commit_value(other, f'k{i}', 100 + i)
        poller = again.new_instance()
        poller.poll_invalidations()
        poller.release()
    finally:
        resume.set()
    assert persistentcache.wait(again, 10) is not None
    assert again._cache_warmer.caught_up >= 1
    reader = again.new_instance()
    reader.poll_invalidations()
    hits = _stats(again)['hits']
    values = [_value(reader, oid)[0] for oid in oids]
    assert values == [100 if i == 0 else 119 if i == 19 else i
                      for i in range(20)]
    # The others came from the file.
    assert _stats(again)['hits'] - hits == 18
    reader.release()
    other.close()


def test_a_storage_closed_while_it_reads_back_leaves_the_file(
        open_storage, tmp_path, monkeypatch, background):
    directory = str(tmp_path / 'cache')
    oids, path = _written(open_storage, directory)
    with open(path, 'rb') as f:
        before = f.read()

    def before_step(warmer):
        # The close arrives after the first step.
        if len(warmer._cache):
            warmer._stop.set()
    monkeypatch.setattr(persistentcache.Warmer, 'before_step', before_step)
    again = open_storage(cache_local_dir=directory)
    persistentcache.wait(again, 10)
    assert 0 < len(again._cache) < 20
    again.close()
    with open(path, 'rb') as f:
        assert f.read() == before
    # The next process reads it back whole.
    monkeypatch.setattr(persistentcache.Warmer, 'before_step', None)
    third = open_storage(cache_local_dir=directory)
    assert persistentcache.wait(third, 10) >= 20


def test_a_cache_emptied_while_it_reads_back_gets_nothing_more(
        open_storage, tmp_path, monkeypatch, background):
    """The database went back in time (a backup restored) while the
    thread ran: the storage empties its cache and starts its horizon
    again, maybe past the thread's; the thread's file is of the database
    before, so it puts nothing more in."""
    directory = str(tmp_path / 'cache')
    _written(open_storage, directory)

    def before_step(warmer):
        cache = warmer._cache
        if len(cache) and not cache.emptied:
            horizon = cache.horizon
            cache.invalidate_all()
            cache.set_horizon(horizon + 1000)
    monkeypatch.setattr(persistentcache.Warmer, 'before_step', before_step)
    again = open_storage(cache_local_dir=directory)
    assert persistentcache.wait(again, 10) is None
    assert again._cache.emptied == 1 and len(again._cache) == 0
