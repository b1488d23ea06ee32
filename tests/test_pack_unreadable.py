"""A pack never dies on what it cannot read (relstorage.pack.references):
a revision whose pickle names a class that no longer exists, or that
ZODB's referencesf refuses (pickle protocol 4), is read from its opcodes
without importing anything; a revision nobody can read stops garbage
collection, not the pack, and is named.  On every backend and mode."""
import io
import logging
import pickle
import sys
import types

import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from ZODB.MappingStorage import MappingStorage
from ZODB.serialize import referencesf
from ZODB.utils import p64
from ZODB.utils import u64
from ZODB.utils import z64

from relstorage.pack import check_refs
from relstorage.pack.references import Unreadable
from relstorage.pack.references import opcode_references
from relstorage.pack.references import record_references

from backends import query
from test_pack import _exists
from test_pack import _pack


def _oid(n):
    return p64(n)


class _RefPickler(pickle.Pickler):
    """Pickles ``('REF', n)`` as the persistent id ``(oid n, None)``."""

    def persistent_id(self, obj):
        if isinstance(obj, tuple) and len(obj) == 2 and obj[0] == 'REF':
            return (_oid(obj[1]), None)
        return None


def _record(state, protocol, module='gone.module', name='Gone'):
    """A record as ZODB writes one (the class, then the state), in
    ``protocol``, for a class ``module.name`` that need not exist."""
    out = io.BytesIO()
    if protocol >= 4:
        head = (b'\x80' + bytes([protocol]) + b'\x8c' + bytes([len(module)])
                + module.encode() + b'\x8c' + bytes([len(name)])
                + name.encode() + b'\x93N\x86.')
    else:
        head = (b'\x80' + bytes([protocol]) + b'c' + module.encode() + b'\n'
                + name.encode() + b'\nN\x86.')
    out.write(head)
    _RefPickler(out, protocol).dump(state)
    return out.getvalue()


# -- the references, without a database ---------------------------------

def test_every_record_of_a_database_reads_as_referencesf_reads_it():
    db = ZODB.DB(MappingStorage())
    conn = db.open()
    root = conn.root()
    from BTrees.OOBTree import OOBTree
    root['tree'] = tree = OOBTree()
    for index in range(300):
        tree[index] = PersistentMapping(n=index, peers=[])
    for index in range(0, 300, 7):
        tree[index]['peers'].append(tree[(index * 13) % 300])
    transaction.commit()
    storage = db.storage
    checked = 0
    for oid in list(storage._data):
        data, _ = storage.load(oid)
        expected = sorted(u64(ref) for ref in referencesf(data))
        assert sorted(opcode_references(data)) == expected
        checked += 1
    assert checked > 300
    db.close()


@pytest.mark.parametrize('protocol', [1, 2, 3, 4, 5])
def test_a_class_that_no_longer_exists_is_only_a_name(protocol):
    data = _record({'a': ('REF', 7), 'b': [('REF', 9), {1, 2}],
                    'c': frozenset([3]), 'd': b'bytes'}, protocol)
    assert record_references(data, referencesf) == {7, 9}
    assert sorted(opcode_references(data)) == [7, 9]


def test_zodbs_referencesf_refuses_protocol_4_and_the_walk_reads_it():
    data = _record({'a': ('REF', 5)}, 4)
    with pytest.raises(ValueError):
        referencesf(data)
    assert record_references(data, referencesf) == {5}


class _Trap:
    """A class whose loading, reduction or state would set ``sprung``."""
    sprung = []

    def __setstate__(self, state):
        _Trap.sprung.append('setstate')

    def __reduce__(self):
        return (_spring, ('reduce',))


def _spring(what):
    _Trap.sprung.append(what)
    return _Trap()


@pytest.fixture
def trap_module(monkeypatch):
    """``relstorage_test_trap``: importable, its class and function set a
    flag when anything uses them."""
    module = types.ModuleType('relstorage_test_trap')
    module._Trap = _Trap
    module._spring = _spring
    _Trap.__module__ = module.__name__
    _spring.__module__ = module.__name__
    monkeypatch.setitem(sys.modules, module.__name__, module)
    _Trap.sprung.clear()
    yield module
    _Trap.sprung.clear()


@pytest.mark.parametrize('protocol', [2, 3, 4])
def test_reading_references_runs_nothing_from_the_data(trap_module,
                                                       protocol):
    evil = [
        # os.system('false'), posix.getcwd(): reductions of real callables.
        b'\x80\x03cos\nsystem\nX\x05\x00\x00\x00false\x85R.',
        b'\x80\x03cposix\ngetcwd\n)R.',
        # A class whose __setstate__ and reduction set a flag.
        pickle.dumps(trap_module._Trap(), protocol),
        b'\x80\x03crelstorage_test_trap\n_spring\nX\x01\x00\x00\x00x\x85R.',
        b'\x80\x02crelstorage_test_trap\n_Trap\n)\x81}b.',
    ]
    # (The traps work: unpickled, they spring.)
    pickle.loads(evil[2])
    pickle.loads(evil[4])
    assert _Trap.sprung == ['reduce', 'setstate']
    _Trap.sprung.clear()
    for state in evil:
        data = _record(None, 3) + state
        found = record_references(data, referencesf)
        assert found == set()
        assert opcode_references(data) == []
    assert _Trap.sprung == []


def test_a_deep_or_huge_state_reads_without_recursion_or_error():
    deep = b'\x80\x03' + b']' * 200000 + b'a' * 199999 + b'.'
    assert opcode_references(_record(None, 3) + deep) == []
    huge = _record({'blob': b'x' * (8 << 20), 'ref': ('REF', 3)}, 3)
    assert record_references(huge, referencesf) == {3}


@pytest.mark.parametrize('damage', [
    lambda d: d[:-3],                       # truncated
    lambda d: d[:10],                       # the class only, cut short
    lambda d: b'not a pickle at all',
    lambda d: d.replace(b'C\x08', b'C\x05', 1),   # an oid of 5 bytes
])
def test_a_damaged_record_is_unreadable_with_a_reason(damage):
    data = damage(_record({'a': ('REF', 5)}, 3))
    with pytest.raises(Unreadable) as raised:
        record_references(data, referencesf)
    assert str(raised.value)
    assert len(str(raised.value)) <= 200


# -- packs ---------------------------------------------------------------

def _store_raw(storage, oid, data):
    """Write ``data`` as the new revision of ``oid``; returns its tid."""
    try:
        serial = storage.load(p64(oid))[1]
    except KeyError:
        serial = z64
    txn = transaction.Transaction()
    storage.tpc_begin(txn)
    storage.store(p64(oid), serial, data, '', txn)
    storage.tpc_vote(txn)
    return u64(storage.tpc_finish(txn))


def _revisions(storage, oid):
    return query(storage, f'SELECT COUNT(*) FROM object_state WHERE zoid = '
                          f'{oid}')[0][0]


@pytest.fixture
def graph(open_storage):
    """``(storage, db, oids)``: root -> holder (whose record the test
    replaces) -> kept; an old revision of ``changed`` (reachable); an
    unlinked ``garbage``."""
    storage = open_storage()
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    root['holder'] = PersistentMapping(kept=PersistentMapping())
    root['changed'] = PersistentMapping(n=0)
    root['garbage'] = PersistentMapping()
    transaction.commit()
    root['changed']['n'] = 1
    oids = {name: u64(root[name]._p_oid)
            for name in ('holder', 'changed', 'garbage')}
    oids['kept'] = u64(root['holder']['kept']._p_oid)
    del root['garbage']
    transaction.commit()
    conn.close()
    yield storage, db, oids
    db.close()


def test_a_revision_of_a_vanished_class_keeps_what_it_refers_to(graph):
    storage, _, oids = graph
    # As after a class was renamed and the record written in protocol 4:
    # ZODB's referencesf refuses it, the opcodes name 'kept'.
    _store_raw(storage, oids['holder'],
               _record({'kept': ('REF', oids['kept'])}, 4))
    _pack(storage)
    assert _exists(storage, oids['kept'])
    assert not _exists(storage, oids['garbage'])
    assert query(storage, 'SELECT COUNT(*) FROM pack_unreadable')[0][0] == 0


def test_an_unreadable_revision_stops_garbage_collection_not_the_pack(
        graph, keep_history, caplog):
    storage, _, oids = graph
    damaged = _record({'kept': ('REF', oids['kept'])}, 3)[:-4]
    tid = _store_raw(storage, oids['holder'], damaged)
    with caplog.at_level(logging.WARNING):
        _pack(storage)
    # Nothing removed on a guess ...
    assert _exists(storage, oids['garbage'])
    assert _exists(storage, oids['kept'])
    if keep_history:
        # ... but old revisions go.
        assert _revisions(storage, oids['changed']) == 1
    text = caplog.text
    assert f'oid 0x{oids["holder"]:x} at tid 0x{tid:x}' in text
    assert 'cannot be read' in text
    assert 'garbage collection skipped' in text
    [(zoid, at, reason)] = query(
        storage, 'SELECT zoid, tid, reason FROM pack_unreadable')
    assert (zoid, at) == (oids['holder'], tid) and reason
    # A later pack still knows (the analysis does not read it again).
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _pack(storage)
    assert _exists(storage, oids['garbage'])
    assert 'garbage collection skipped' in caplog.text
    # Once the revision is replaced, garbage goes again.
    # (History-preserving: the damaged revision is an old one now, which
    # the pack removes.)
    _store_raw(storage, oids['holder'],
               _record({'kept': ('REF', oids['kept'])}, 3))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _pack(storage)
    assert 'garbage collection skipped' not in caplog.text
    assert not _exists(storage, oids['garbage'])
    assert _exists(storage, oids['kept'])
    assert check_refs(storage, referencesf) == ([], [])
    assert query(storage, 'SELECT COUNT(*) FROM pack_unreadable')[0][0] == 0


def test_an_unreadable_revision_committed_during_the_deletions(graph,
                                                               caplog):
    """Committed after the analysis, it links the garbage again: the
    deletion phase's catch-up cannot follow it, so no garbage goes."""
    storage, _, oids = graph
    _pack(storage, prepack_only=True)
    relinks = _record({'again': ('REF', oids['garbage'])}, 3)[:-4]
    _store_raw(storage, oids['holder'], relinks)
    with caplog.at_level(logging.WARNING):
        _pack(storage, skip_prepack=True)
    assert _exists(storage, oids['garbage'])
    assert 'garbage collection skipped' in caplog.text
