"""The allow-list of classes a loaded pickle may name (allowed-classes,
relstorage.classes.allowed): what it admits, and that a crafted record
naming anything else fails its load with nothing imported or run."""
import io
import pickle

import pytest
import transaction
import ZODB
import ZODB.config
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping

from relstorage.classes import AllowList
from relstorage.classes import allowed
from relstorage.config.options import Options
from relstorage.errors import ClassNotAllowedError
from relstorage.errors import ConfigurationError

SITE = ('persistent.*', 'BTrees.*')


def test_what_a_list_admits():
    entries = AllowList(['myapp.content.*', 'other.Thing'])
    assert entries.admits('myapp.content', 'Page')
    assert entries.admits('myapp.content.folder', 'Folder')
    assert entries.admits('other', 'Thing')
    assert not entries.admits('other', 'Else')
    assert not entries.admits('myapp', 'Page')
    assert not entries.admits('myapp.contents', 'Page')
    # The classes of plain values, and not the builtins that run code.
    assert entries.admits('datetime', 'datetime')
    assert entries.admits('builtins', 'set')
    for dangerous in ('eval', 'exec', 'getattr', '__import__', 'open'):
        assert not entries.admits('builtins', dangerous)
    assert not entries.admits('os', 'system')


def test_bad_entries_fail_at_start_up_naming_the_option():
    for text in ('bad-name', 'nodots', 'a.*.b', 'a..b'):
        with pytest.raises(ConfigurationError,
                           match="^allowed-classes: '"):
            Options(allowed_classes=text)
    assert Options(allowed_classes='a.B, c.*').allowed_classes == (
        'a.B', 'c.*')


def _refused(load, name):
    """``load()`` fails because of the allow-list (ZODB 6.4 raises its
    StateLoadError from the unpickler's error)."""
    with pytest.raises(Exception) as caught:
        load()
    error = caught.value
    while error is not None and not isinstance(error, ClassNotAllowedError):
        error = error.__cause__
    assert error is not None, repr(caught.value)
    assert name in str(error)


def _crafted(tmp_path):
    """A record whose state reduces os.system on a command that leaves a
    file, and the file."""
    marker = tmp_path / 'ran'
    out = io.BytesIO()
    pickle.Pickler(out, 2).dump(PersistentMapping)
    state = (f'(dp0\nVdata\np1\n(dp2\nVx\ncos\nsystem\n(Vtouch {marker}\n'
             f'tRsss.').encode()
    return out.getvalue() + state, marker


def test_a_crafted_record_fails_its_load(open_storage, tmp_path):
    storage = open_storage(allowed_classes=' '.join(SITE))
    db = ZODB.DB(storage, class_factory=allowed)
    conn = db.open()
    root = conn.root()
    root['tree'] = tree = OOBTree()
    tree['a'] = PersistentMapping({'fine': True})
    transaction.commit()
    data, marker = _crafted(tmp_path)
    txn = transaction.Transaction()
    storage.tpc_begin(txn)
    oid = storage.new_oid()
    storage.store(oid, None, data, '', txn)
    storage.tpc_vote(txn)
    storage.tpc_finish(txn)
    other = db.open(transaction.TransactionManager())
    assert other.root()['tree']['a']['fine'] is True
    _refused(lambda: other.get(oid)['data'], 'os.system')
    assert not marker.exists()
    other.close()
    conn.close()
    db.close()


def test_without_a_list_zodb_loads_as_it_always_did(open_storage):
    storage = open_storage()
    db = ZODB.DB(storage, class_factory=allowed)
    conn = db.open()
    conn.root()['x'] = PersistentMapping({'n': 1})
    transaction.commit()
    other = db.open(transaction.TransactionManager())
    assert other.root()['x']['n'] == 1
    other.close()
    conn.close()
    db.close()


def test_from_a_zodb_section(tmp_path, monkeypatch):
    config = f'''
        %import relstorage
        <zodb>
          class-factory relstorage.classes.allowed
          <relstorage>
            keep-history false
            allowed-classes persistent.* BTrees.* {__name__}.Allowed
            <sqlite3>
              data-dir {tmp_path / 'db'}
            </sqlite3>
          </relstorage>
        </zodb>
    '''
    db = ZODB.config.databaseFromString(config)
    conn = db.open()
    conn.root()['ok'] = Allowed()
    # (A persistent reference names its class: the mapping that holds
    # the object is what cannot be loaded.)
    conn.root()['box'] = PersistentMapping({'not': NotAllowed()})
    transaction.commit()
    conn.close()
    db.close()
    db = ZODB.config.databaseFromString(config)
    conn = db.open()
    assert isinstance(conn.root()['ok'], Allowed)
    _refused(lambda: conn.root()['box']['not'], 'NotAllowed')
    conn.close()
    db.close()


class Allowed(PersistentMapping):
    pass


class NotAllowed(PersistentMapping):
    pass
