"""The object ids a stored record refers to, for the pack's analysis.

A record is two pickles: the class, then the state.  The references are
read first with the ``referencesf`` the caller of ``pack`` gave (ZODB's:
``noload``, in C, which imports nothing), and where that fails (pickle
protocol 4 and 5, which zodbpickle's ``noload`` refuses, or whatever else
it trips on) by walking the pickle's opcodes (``relstorage.pickles``):
nothing is imported, no reducer or ``__setstate__`` runs, and a class
that no longer exists (renamed by zodbupdate, an add-on removed) is only
a name.  A record neither can read
(damaged, truncated) raises ``Unreadable``: the pack then keeps every
object it might reach (``relstorage.pack.analysis``).

The references kept are those ``referencesf`` returns: a persistent id
that is an oid, or a tuple whose first item is one (the oid and its
class).  The list forms (weak references, references to other
databases) are not followed, as ZODB's ``referencesf`` does not.
"""
from ZODB.utils import u64

from relstorage.pickles import read_record

#: How much of an error's text a record's description keeps.
REASON_LENGTH = 200


class Unreadable(Exception):
    """The references of a record cannot be read: the reason, short."""


def record_references(data, referencesf):
    """The oids (ints) ``data`` refers to; raises ``Unreadable``."""
    try:
        return {u64(ref) for ref in referencesf(data)}
    except Exception:   # noqa: BLE001 - any failure: read the opcodes
        pass
    try:
        return set(opcode_references(data))
    except Exception as e:   # noqa: BLE001 - whatever the data does
        text = f'{type(e).__name__}: {e}'
        raise Unreadable(text[:REASON_LENGTH]) from None


def opcode_references(data):
    """The oids the pickles of ``data`` refer to, from their opcodes alone
    (``relstorage.pickles``); raises on what is not a sequence of
    well-formed pickles."""
    found = []

    def on_ref(pid):
        oid = _oid(pid)
        if oid is not None:
            found.append(oid)
    read_record(data, on_ref=on_ref)
    return found


def _oid(value):
    """The oid (an int) of a persistent id, or None where it names none
    this database follows (the list forms)."""
    if isinstance(value, tuple):
        if not value:
            raise ValueError('an empty persistent id')
        value = value[0]
    elif isinstance(value, list):
        return None
    if isinstance(value, str):
        # Pickled by Python 2 as str (protocol 0-2): its bytes.
        value = value.encode('latin-1')
    if not isinstance(value, bytes) or len(value) != 8:
        raise ValueError(f'a persistent id that is not an oid: {value!r:.40}')
    return u64(value)
