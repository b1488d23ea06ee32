"""The object ids a stored record refers to, for the pack's analysis.

A record is two pickles: the class, then the state.  The references are
read first with the ``referencesf`` the caller of ``pack`` gave (ZODB's:
``noload``, in C, which imports nothing), and where that fails (pickle
protocol 4 and 5, which zodbpickle's ``noload`` refuses, or whatever else
it trips on) by walking the pickle's opcodes (``pickletools.genops``)
with a stack of plain values: nothing is imported, no reducer or
``__setstate__`` runs, and a class that no longer exists (renamed by
zodbupdate, an add-on removed) is only a name.  A record neither can read
(damaged, truncated) raises ``Unreadable``: the pack then keeps every
object it might reach (``relstorage.pack.analysis``).

The references kept are those ``referencesf`` returns: a persistent id
that is an oid, or a tuple whose first item is one (the oid and its
class).  The list forms (weak references, references to other
databases) are not followed, as ZODB's ``referencesf`` does not.
"""
import io
import pickletools

from ZODB.utils import u64

#: How much of an error's text a record's description keeps.
REASON_LENGTH = 200


class Unreadable(Exception):
    """The references of a record cannot be read: the reason, short."""


class _Mark:
    """The stack's MARK."""


class _Opaque:
    """A value the walk does not need to know (a dict, an object being
    built, the result of a reduction)."""


class _Global:
    """A global named by the pickle (never imported)."""

    __slots__ = ('module', 'name')

    def __init__(self, module, name):
        self.module, self.name = module, name


#: Python 3's pickles of protocols 0-2 write bytes as a reduction:
#: ``_codecs.encode(text, 'latin1')``.  The walk computes that one itself
#: (an oid may be written so) and calls nothing else.
_ENCODE = ('_codecs', 'encode')


_MARK = _Mark()
_OPAQUE = _Opaque()

_VALUE_OPS = frozenset((
    'STRING', 'BINSTRING', 'SHORT_BINSTRING', 'BINBYTES', 'SHORT_BINBYTES',
    'BINBYTES8', 'UNICODE', 'BINUNICODE', 'SHORT_BINUNICODE',
    'BINUNICODE8', 'INT', 'BININT', 'BININT1', 'BININT2', 'LONG', 'LONG1',
    'LONG4', 'FLOAT', 'BINFLOAT'))
_CONSTANTS = {'NONE': None, 'NEWTRUE': True, 'NEWFALSE': False,
              'EMPTY_TUPLE': ()}
_PUTS = frozenset(('PUT', 'BINPUT', 'LONG_BINPUT'))
_GETS = frozenset(('GET', 'BINGET', 'LONG_BINGET'))
_TUPLES = {'TUPLE1': 1, 'TUPLE2': 2, 'TUPLE3': 3}


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
    (see the module's docstring); raises on what is not a sequence of
    well-formed pickles."""
    stream = io.BytesIO(data)
    found = []
    # One memo for both: ZODB pickles the state with the pickler that
    # pickled the class, whose memo the state's GETs may use.
    memo = {}
    while stream.tell() < len(data):
        found.extend(_one_pickle(stream, memo))
    if not found and not data:
        raise ValueError('an empty record')
    return found


def _pop_to_mark(stack):
    """The items above the topmost MARK, which is removed too."""
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is _MARK:
            items = stack[i + 1:]
            del stack[i:]
            return items
    raise ValueError('no MARK on the stack')


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


def _reduced(function, args):
    """What REDUCE leaves: the bytes of ``_codecs.encode(text,
    'latin1')``, else an opaque value."""
    if (isinstance(function, _Global)
            and (function.module, function.name) == _ENCODE
            and isinstance(args, tuple) and len(args) == 2
            and isinstance(args[0], str)
            and args[1] in ('latin1', 'latin-1')):
        return args[0].encode('latin-1')
    return _OPAQUE


def _one_pickle(stream, memo):
    """The oids of the pickle that starts at ``stream``'s position (left
    after its STOP), with the ``memo`` of the pickles before it."""
    stack, found = [], []
    for opcode, arg, _ in pickletools.genops(stream):
        name = opcode.name
        if name in _VALUE_OPS:
            stack.append(arg)
        elif name in _CONSTANTS:
            stack.append(_CONSTANTS[name])
        elif name == 'MARK':
            stack.append(_MARK)
        elif name == 'DUP':
            stack.append(stack[-1])
        elif name in _PUTS:
            memo[arg] = stack[-1]
        elif name == 'MEMOIZE':
            memo[len(memo)] = stack[-1]
        elif name in _GETS:
            stack.append(memo[arg])
        elif name in _TUPLES:
            count = _TUPLES[name]
            items = tuple(stack[-count:])
            if len(items) != count:
                raise ValueError(f'{name} on a short stack')
            del stack[-count:]
            stack.append(items)
        elif name == 'TUPLE':
            stack.append(tuple(_pop_to_mark(stack)))
        elif name == 'EMPTY_LIST':
            stack.append([])
        elif name == 'LIST':
            stack.append(_pop_to_mark(stack))
        elif name == 'APPEND':
            value = stack.pop()
            if isinstance(stack[-1], list):
                stack[-1].append(value)
        elif name == 'APPENDS':
            values = _pop_to_mark(stack)
            if isinstance(stack[-1], list):
                stack[-1].extend(values)
        elif name == 'GLOBAL':
            module, _, attribute = arg.partition(' ')
            stack.append(_Global(module, attribute))
        elif name == 'STACK_GLOBAL':
            attribute, module = stack.pop(), stack.pop()
            stack.append(_Global(module, attribute))
        elif name == 'REDUCE':
            args, function = stack.pop(), stack.pop()
            stack.append(_reduced(function, args))
        elif name == 'PERSID':
            oid = _oid(arg)
            if oid is not None:
                found.append(oid)
            stack.append(_OPAQUE)
        elif name == 'BINPERSID':
            oid = _oid(stack.pop())
            if oid is not None:
                found.append(oid)
            stack.append(_OPAQUE)
        elif name == 'STOP':
            if len(stack) != 1:
                raise ValueError(f'STOP with {len(stack)} items on the stack')
            return found
        else:
            # Everything else builds values this walk need not know (dicts,
            # sets, globals, objects, reductions): take what it takes,
            # leave an opaque value for what it leaves.
            before = opcode.stack_before
            if pickletools.markobject in before:
                _pop_to_mark(stack)
                before = before[:before.index(pickletools.markobject)]
            if before:
                if len(stack) < len(before):
                    raise ValueError(f'{name} on a short stack')
                del stack[-len(before):]
            stack.extend([_OPAQUE] * len(opcode.stack_after))
    raise ValueError('a pickle without STOP')
