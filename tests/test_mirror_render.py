"""The JSON rendering of stored records (relstorage.mirror.render) and the
reading of pickles as data beneath it (relstorage.pickles): what real
states look like, and that no crafted record runs anything."""
import collections
import datetime
import decimal
import io
import json
import pickle
import sys

import pytest
import transaction
import ZODB
from BTrees.OOBTree import OOBTree
from persistent import Persistent
from persistent.mapping import PersistentMapping
from ZODB.MappingStorage import MappingStorage
from ZODB.serialize import ObjectWriter
from ZODB.utils import load_current
from ZODB.utils import p64

from relstorage import pickles
from relstorage.mirror import render as render_module
from relstorage.mirror.render import render
from relstorage.pack.references import opcode_references


class Document(Persistent):
    """A content object as a CMS keeps one."""


class Token:
    """A plain object kept inside a persistent one's state."""

    def __init__(self, value):
        self.value = value


def _record(state, cls=PersistentMapping, protocol=3):
    """A record as ZODB writes one: the class pickle, then the state, by
    one pickler."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol)
    pickler.dump(cls)
    pickler.dump(state)
    return out.getvalue()


def _json(data):
    found = render(data)
    assert found.error is None, found.error
    return json.loads(found.json)


PLAIN = {
    'text': 'Grüße', 'int': 7, 'big': 2 ** 70, 'float': 2.5, 'none': None,
    'true': True, 'list': [1, [2, 3]], 'bytes': b'\x00\xff',
    'tuple': (1, 'a'), 'set': {3}, 'frozenset': frozenset(['x']),
    'bytearray': bytearray(b'ab'), 'int_keys': {1: 'one'},
    'bang': {'!b': 'not a tag'}, 'nul': 'a\x00b', 'inf': float('-inf'),
    'when': datetime.datetime(2026, 11, 28, 3, 30, 1, 250000),
    'utc': datetime.datetime(2026, 1, 2, 3, 4, 5,
                             tzinfo=datetime.timezone.utc),
    'day': datetime.date(1999, 12, 31), 'at': datetime.time(23, 59, 58, 7),
    'span': datetime.timedelta(days=2, seconds=3, microseconds=4),
    'price': decimal.Decimal('19.90'),
}

EXPECTED = {
    'text': 'Grüße', 'int': 7, 'big': 2 ** 70, 'float': 2.5, 'none': None,
    'true': True, 'list': [1, [2, 3]], 'bytes': {'!b': 'AP8='},
    'tuple': {'!t': [1, 'a']}, 'set': {'!set': [3]},
    'frozenset': {'!fset': ['x']}, 'bytearray': {'!ba': 'YWI='},
    'int_keys': {'!d': [[1, 'one']]}, 'bang': {'!d': [['!b', 'not a tag']]},
    'nul': {'!text': 'YQBi'}, 'inf': {'!float': '-inf'},
    'when': {'!dt': '2026-11-28T03:30:01.250000'},
    'utc': {'!dt': '2026-01-02T03:04:05+00:00'},
    'day': {'!date': '1999-12-31'}, 'at': {'!time': '23:59:58.000007'},
    'span': {'!td': [2, 3, 4]}, 'price': {'!dec': '19.90'},
}


@pytest.mark.parametrize('protocol', range(0, pickle.HIGHEST_PROTOCOL + 1))
def test_plain_values_render_the_same_in_every_protocol(protocol):
    found = render(_record({'data': PLAIN}, protocol=protocol))
    assert (found.module, found.name) == ('persistent.mapping',
                                          'PersistentMapping')
    assert json.loads(found.json) == {'data': EXPECTED}


def test_a_python_2_str_is_text_and_an_old_class_pickle_is_read():
    # ((module, name), None) then {'title': str}: protocol 1 as Python 2's
    # ZODB wrote it.
    data = (b'((U\x07ProductU\x08DocumenttNt.'
            b'}U\x05titleU\x04Caf\xe9s.')
    found = render(data)
    assert (found.module, found.name) == ('Product', 'Document')
    assert json.loads(found.json) == {'title': 'Café'}


def test_real_states_from_zodb():
    db = ZODB.DB(MappingStorage())
    conn = db.open()
    root = conn.root()
    root['tree'] = tree = OOBTree()
    for key in 'abc':
        tree[key] = PersistentMapping({'key': key})
    root['doc'] = doc = Document()
    doc.title = 'Front page'
    doc.token = Token(3)
    doc.tree = tree
    doc.modified = datetime.datetime(2026, 5, 6, 7, 8, 9)
    transaction.commit()
    storage = db.storage

    def rendered(obj):
        data, _ = load_current(storage, obj._p_oid)
        return render(data)
    tree_json = rendered(tree)
    assert (tree_json.module, tree_json.name) == ('BTrees.OOBTree', 'OOBTree')
    # A small tree's state: ((bucket state,),) holding keys and references.
    flat = json.loads(tree_json.json)['!t'][0]['!t'][0]['!t'][0]['!t']
    assert flat[0::2] == ['a', 'b', 'c']
    assert [ref['!ref'] for ref in flat[1::2]] == [
        int.from_bytes(tree[k]._p_oid, 'big') for k in 'abc']
    assert flat[1]['!class'] == 'persistent.mapping.PersistentMapping'
    doc_json = rendered(doc)
    assert (doc_json.module, doc_json.name) == (__name__, 'Document')
    assert json.loads(doc_json.json) == {
        'title': 'Front page',
        'token': {'!obj': f'{__name__}.Token', '!state': {'value': 3}},
        'tree': {'!ref': int.from_bytes(tree._p_oid, 'big'),
                 '!class': 'BTrees.OOBTree.OOBTree'},
        'modified': {'!dt': '2026-05-06T07:08:09'},
    }
    root_json = json.loads(rendered(root).json)
    assert root_json['data']['doc'] == {
        '!ref': int.from_bytes(doc._p_oid, 'big'),
        '!class': f'{__name__}.Document'}
    conn.close()
    db.close()


def test_the_forms_of_persistent_reference():
    oid = p64(5)
    forms = [
        (oid, {'!ref': 5}),
        ((oid, None), {'!ref': 5}),
        ([oid], {'!ref': 5, '!weak': True}),
        (['w', (oid,)], {'!ref': 5, '!weak': True}),
        (['w', (oid, 'other')], {'!ref': 5, '!weak': True, '!db': 'other'}),
        (['n', ('other', oid)], {'!ref': 5, '!db': 'other'}),
        (['m', ('other', oid, PersistentMapping)],
         {'!ref': 5, '!db': 'other',
          '!class': 'persistent.mapping.PersistentMapping'}),
        ('not an oid', {'!pid': 'not an oid'}),
    ]
    for pid, expected in forms:
        out = io.BytesIO()
        pickler = pickle.Pickler(out, 3)
        pickler.persistent_id = (
            lambda obj, pid=pid: pid if obj == 'REF' else None)
        pickler.dump(PersistentMapping)
        pickler.dump({'x': 'REF'})
        assert _json(out.getvalue()) == {'x': expected}, pid


def test_a_record_that_is_not_two_pickles_has_no_json():
    for data, why in [(b'', 'empty'), (b'\x80\x03}q\x00', 'STOP'),
                      (b'\x80\x03N.', '1 pickles'), (b'garbage', ''),
                      (_record({})[:-1], 'STOP')]:
        found = render(data)
        assert found.json is None and why in found.error, (data, found)


# -- nothing in the data runs --------------------------------------------

def _crafted_state(state_pickle, protocol=2):
    head = io.BytesIO()
    pickle.Pickler(head, protocol).dump(PersistentMapping)
    return head.getvalue() + state_pickle


def test_a_reduction_of_os_system_is_described_not_called(tmp_path):
    marker = tmp_path / 'ran'
    for module in ('os', 'posix'):
        state = (f'c{module}\nsystem\n(Vtouch {marker}\ntR.').encode()
        assert _json(_crafted_state(state)) == {
            '!call': f'{module}.system', '!args': [f'touch {marker}']}
    state = b'cposix\ngetcwd\n)R.'
    assert _json(_crafted_state(state)) == {'!call': 'posix.getcwd'}
    # The same through the protocol 4 opcodes (STACK_GLOBAL, NEWOBJ_EX).
    state = (b'\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R.')
    assert _json(_crafted_state(state)) == {'!call': 'os.system',
                                            '!args': ['true']}
    assert not marker.exists()


class Trap:
    """A class whose unpickling hooks record that they ran."""

    ran = []

    def __setstate__(self, state):
        Trap.ran.append('__setstate__')

    def __reduce__(self):
        return (Trap, (), {'armed': True})

    def __new__(cls, *args):
        Trap.ran.append('__new__')
        return super().__new__(cls)


def test_no_class_is_imported_and_no_hook_runs(tmp_path, monkeypatch):
    module = tmp_path / 'booby_trapped.py'
    marker = tmp_path / 'imported'
    module.write_text(f'open({str(marker)!r}, "w").close()\n'
                      'class Thing:\n    pass\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    state = b'cbooby_trapped\nThing\n)\x81}X\x01\x00\x00\x00aK\x01sb.'
    assert _json(_crafted_state(state)) == {
        '!obj': 'booby_trapped.Thing', '!state': {'a': 1}}
    assert not marker.exists()
    assert 'booby_trapped' not in sys.modules
    data = _record({'trap': Trap()})
    del Trap.ran[:]
    assert _json(data) == {'trap': {'!call': f'{__name__}.Trap',
                                    '!state': {'armed': True}}}
    assert Trap.ran == []


def test_deep_huge_and_self_containing_states_have_no_json(monkeypatch):
    # Lists within lists, far deeper than Python's recursion limit.
    deep = b'\x80\x02' + b']' * 100000 + b'a' * 99999 + b'.'
    found = render(_crafted_state(deep))
    assert found.json is None and 'deeper' in found.error
    # A list that holds itself.
    looped = b'\x80\x02]q\x00h\x00a.'
    found = render(_crafted_state(looped))
    assert found.json is None and 'contains itself' in found.error
    # Shared values that expand past any size: a list of ten copies of a
    # list of ten copies... 30 times (10**30 leaves).
    bomb = b'\x80\x02X\x01\x00\x00\x00xq\x000'
    for level in range(30):
        bomb += (b'(' + (b'h' + bytes([level])) * 10 + b'lq'
                 + bytes([level + 1]) + b'0')
    bomb += b'h\x1e.'
    found = render(_crafted_state(bomb))
    assert found.json is None and 'limit' in found.error
    # A state longer than the limit.
    monkeypatch.setattr(render_module, 'MAX_CHARS', 1000)
    found = render(_record({'body': 'x' * 2000}))
    assert found.json is None and 'limit' in found.error
    # More opcodes than the reader allows.
    with pytest.raises(pickles.TooLarge):
        pickles.read_record(_record({'items': list(range(100))}),
                            max_opcodes=50)


def test_the_pack_reads_references_through_the_same_reader():
    data = _record({'a': Document(), 'b': [OOBTree()]})
    assert opcode_references(data) == []
    db = ZODB.DB(MappingStorage())
    conn = db.open()
    conn.root()['x'] = PersistentMapping({'y': PersistentMapping()})
    transaction.commit()
    writer = ObjectWriter(conn.root()['x'])
    data = writer.serialize(conn.root()['x'])
    assert opcode_references(data) == [
        int.from_bytes(conn.root()['x']['y']._p_oid, 'big')]
    conn.close()
    db.close()


def test_an_ordered_dict_keeps_its_items_in_order():
    value = collections.OrderedDict([('b', 1), ('a', 2)])
    assert _json(_record({'o': value})) == {
        'o': {'!call': 'collections.OrderedDict',
              '!pairs': [['b', 1], ['a', 2]]}}


def test_the_opcode_walk_and_the_c_unpickler_render_alike(monkeypatch):
    """render() reads with Python's C unpickler (its globals resolved to
    stand-ins, nothing imported) and falls back to the opcode walk: both
    give the same JSON, sets included, in every protocol."""
    records = [_record({'data': PLAIN}, protocol=p)
               for p in range(pickle.HIGHEST_PROTOCOL + 1)]
    records += [_record({'trap': Trap(), 'token': Token(1), 'nested': {
        'ordered': collections.OrderedDict([('b', 1)]),
        'sets': [{3, 1, 2}, frozenset({'z', 'a'})]}}, protocol=p)
        for p in range(pickle.HIGHEST_PROTOCOL + 1)]
    records.append(_crafted_state(b'cos\nsystem\n(Vtrue\ntR.'))
    records.append(_crafted_state(
        b'cbooby_trapped\nThing\n)\x81}X\x01\x00\x00\x00aK\x01sb.'))
    fast = [render(data) for data in records]

    def refuse(data):
        raise ValueError('the C unpickler is not used here')
    monkeypatch.setattr(render_module, 'read_record_fast', refuse)
    walked = [render(data) for data in records]
    for one, other in zip(fast, walked):
        assert one.error is None and other.error is None
        assert (one.module, one.name, json.loads(one.json)) == (
            other.module, other.name, json.loads(other.json))
    assert 'booby_trapped' not in sys.modules


class RichText(Persistent):
    """A rich text field's value, as plone.app.textfield keeps one."""


def _plone_like_site():
    """Records of a small Plone-like site: Dexterity-like documents with
    their rich text and workflow history, a BTree folder, a catalog's
    metadata bucket and an index of id sets."""
    from BTrees.IIBTree import IITreeSet
    from BTrees.IOBTree import IOBTree
    from BTrees.Length import Length
    db = ZODB.DB(MappingStorage())
    conn = db.open()
    root = conn.root()
    root['site'] = site = Document()
    site._tree = OOBTree()
    site._count = Length(0)
    when = datetime.datetime(2026, 11, 28, 4, 16, 30, 120000)
    for number in range(40):
        doc = Document()
        doc.id, doc.title = f'doc-{number}', f'Document {number}'
        doc.subject = ('news', 'Grüße')
        doc.creation_date = doc.modification_date = when
        doc.effective_date = None
        doc.text = RichText()
        doc.text.raw = '<p>' + 'x' * number + '</p>'
        doc.workflow_history = PersistentMapping({'wf': ({
            'review_state': 'private', 'time': when, 'actor': 'admin'},)})
        doc.__ac_local_roles__ = {'admin': ['Owner']}
        doc.price = decimal.Decimal('9.99')
        site._tree[doc.id] = doc
        site._count.change(1)
    root['catalog'] = catalog = Document()
    catalog.data = IOBTree()
    catalog.index = OOBTree()
    for rid in range(200):
        catalog.data[rid] = (f'Document {rid}', when, f'/site/doc-{rid}')
    for word in ('news', 'events', 'people'):
        catalog.index[word] = IITreeSet(range(0, 200, 7))
    transaction.commit()
    current = {}
    for txn in db.storage.iterator():
        for record in txn:
            current[record.oid] = record.data
    conn.close()
    db.close()
    return list(current.values())


def _refs_in(value):
    """The oids of every {"!ref": OID} in a rendered state."""
    found = set()
    if isinstance(value, dict):
        if '!ref' in value and not value.get('!weak'):
            found.add(value['!ref'])
        for item in value.values():
            found |= _refs_in(item)
    elif isinstance(value, list):
        for item in value:
            found |= _refs_in(item)
    return found


def test_a_plone_like_site_renders_whole(monkeypatch):
    """Every record of the site renders, with exactly the references
    ZODB's referencesf finds, by both readers alike; the values a query
    looks for are where docs/json.rst says."""
    from ZODB.serialize import referencesf
    records = _plone_like_site()
    assert len(records) > 50
    fast = [render(data) for data in records]

    def refuse(data):
        raise ValueError('the C unpickler is not used here')
    monkeypatch.setattr(render_module, 'read_record_fast', refuse)
    walked = [render(data) for data in records]
    titles = set()
    for data, one, other in zip(records, fast, walked):
        assert one.error is None, one.error
        state = json.loads(one.json)
        assert state == json.loads(other.json)
        assert _refs_in(state) == {int.from_bytes(ref, 'big')
                                   for ref in referencesf(data)}
        if one.name == 'Document' and 'title' in state:
            titles.add(state['title'])
            assert state['creation_date'] == {
                '!dt': '2026-11-28T04:16:30.120000'}
            assert state['subject'] == {'!t': ['news', 'Grüße']}
            assert state['price'] == {'!dec': '9.99'}
            assert state['__ac_local_roles__'] == {'admin': ['Owner']}
    assert titles == {f'Document {n}' for n in range(40)}
