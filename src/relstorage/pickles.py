"""Pickles read as data: the values a pickle describes, without running it.

``read_record(data)`` walks the opcodes of a stored record (two pickles:
the class, then the state, sharing one memo as ZODB writes them) with a
stack of plain values (``pickletools.genops`` parses; nothing here
imports a module, calls a reducer or runs ``__setstate__``).  What a real
unpickler would have to run is described instead:

* a global (a class, a function) is a :class:`Global`, a name only;
* a reduction (``REDUCE``) is a :class:`Call` of that global with its
  arguments, never made; the few that Python's own pickles use for plain
  values are worked out here because they are pure (``_codecs.encode``
  of text to Latin-1 bytes, ``set``, ``frozenset``, ``bytearray``), and
  ``copyreg``'s reconstructors become the :class:`Instance` they make;
* an object built from its class (``NEWOBJ``, ``OBJ``, ``INST``) is an
  :class:`Instance`; ``BUILD`` gives it (or a call) its ``state``, and
  items appended or set on it are kept beside;
* a persistent reference is a :class:`Ref` of its persistent id;
* a dict is a :class:`Dict` of its pairs in order (keys may be values of
  any kind), a set a :class:`Set`.

Lists, tuples, strings, bytes, numbers, booleans and None are themselves.
A shared value (the memo) is the same Python object wherever it is used,
so a pickle of a value that contains itself reads as a cycle: whoever
walks the result must watch for one.  ``Limits`` bounds the work: a
record of more opcodes than that raises ``TooLarge``.  Anything else that
is not a sequence of well-formed pickles raises ``ValueError`` (or the
parser's own error), so the caller decides what an unreadable record
means.
"""
import io
import pickle
import pickletools

#: Opcodes per record past which ``read_record`` gives up.
MAX_OPCODES = 2_000_000


class TooLarge(ValueError):
    """The record needs more work than the limit allows."""


class Global:
    """A class or function the pickle names (never imported)."""

    __slots__ = ('module', 'name')

    def __init__(self, module, name):
        self.module, self.name = module, name

    @property
    def dotted(self):
        return f'{self.module}.{self.name}'

    def __eq__(self, other):
        return (isinstance(other, Global)
                and (self.module, self.name) == (other.module, other.name))

    def __hash__(self):
        return hash((self.module, self.name))

    def __repr__(self):
        return f'Global({self.dotted})'


class _Built:
    """What an unpickler would have built by running code: ``state``
    (BUILD), and what APPEND(S) and SETITEM(S) added to it."""

    __slots__ = ('state', 'listitems', 'dictitems')

    def __init__(self):
        self.state = None
        self.listitems = []
        self.dictitems = []

    # What the C unpickler of ``read_record_fast`` calls: BUILD,
    # APPEND(S), SETITEM(S).
    def __setstate__(self, state):
        self.state = state

    def append(self, value):
        self.listitems.append(value)

    def extend(self, values):
        self.listitems.extend(values)

    def __setitem__(self, key, value):
        self.dictitems.append((key, value))


class Call(_Built):
    """``function(*args)``, described, never made."""

    __slots__ = ('function', 'args')

    def __init__(self, function, args):
        super().__init__()
        self.function, self.args = function, args

    def __repr__(self):
        return f'Call({self.function!r}, {self.args!r})'


class Instance(_Built):
    """An object of ``cls`` (usually a :class:`Global`), made from
    ``args`` (and ``kwargs``) and given ``state``."""

    __slots__ = ('cls', 'args', 'kwargs')

    def __init__(self, cls, args=(), kwargs=None):
        super().__init__()
        self.cls, self.args, self.kwargs = cls, args, kwargs

    def __repr__(self):
        return f'Instance({self.cls!r}, state={self.state!r})'


class Ref:
    """A persistent reference: ``pid`` as pickled (ZODB's forms: an oid,
    ``(oid, class)``, or a list such as ``['w', (oid,)]``)."""

    __slots__ = ('pid',)

    def __init__(self, pid):
        self.pid = pid

    def __repr__(self):
        return f'Ref({self.pid!r})'


class Dict:
    """A dict: its ``items``, pairs in the order they were set."""

    __slots__ = ('items',)

    def __init__(self, items=None):
        self.items = items if items is not None else []

    def __repr__(self):
        return f'Dict({self.items!r})'


class Set:
    """A set (``frozen``: a frozenset) of ``items``."""

    __slots__ = ('items', 'frozen')

    def __init__(self, items=(), frozen=False):
        self.items, self.frozen = list(items), frozen

    def __repr__(self):
        return f'Set({self.items!r}, frozen={self.frozen})'


class _Mark:
    """The stack's MARK."""

    def __repr__(self):
        return 'MARK'


_MARK = _Mark()

_VALUES = frozenset((
    'INT', 'BININT', 'BININT1', 'BININT2', 'LONG', 'LONG1', 'LONG4',
    'FLOAT', 'BINFLOAT', 'UNICODE', 'BINUNICODE', 'SHORT_BINUNICODE',
    'BINUNICODE8', 'BINBYTES', 'SHORT_BINBYTES', 'BINBYTES8',
    # Python 2's str, which genops reads as Latin-1 text.
    'STRING', 'BINSTRING', 'SHORT_BINSTRING'))
_CONSTANTS = {'NONE': None, 'NEWTRUE': True, 'NEWFALSE': False}
_PUTS = frozenset(('PUT', 'BINPUT', 'LONG_BINPUT'))
_GETS = frozenset(('GET', 'BINGET', 'LONG_BINGET'))
_TUPLES = {'EMPTY_TUPLE': 0, 'TUPLE1': 1, 'TUPLE2': 2, 'TUPLE3': 3}
_IGNORED = frozenset(('PROTO', 'FRAME'))

_BUILTINS = ('builtins', '__builtin__')
_COPYREG = ('copyreg', 'copy_reg')


def read_record(data, max_opcodes=MAX_OPCODES, on_ref=None):
    """The values of the pickles of ``data``, in order (a ZODB record:
    ``[class, state]``); see the module's docstring.  ``on_ref``, when
    given, is called with each persistent id as it is read."""
    stream = io.BytesIO(data)
    # One memo for all: ZODB pickles the state with the pickler that
    # pickled the class, whose memo the state's GETs may use.
    memo = {}
    budget = [max_opcodes]
    values = []
    while stream.tell() < len(data):
        values.append(_one(stream, memo, budget, on_ref))
    if not values:
        raise ValueError('an empty record')
    return values


def _pop_mark(stack):
    """The items above the topmost MARK, which goes too."""
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is _MARK:
            items = stack[i + 1:]
            del stack[i:]
            return items
    raise ValueError('no MARK on the stack')


def _pop(stack, count=1):
    if not count:
        return []
    if len(stack) < count or any(v is _MARK for v in stack[-count:]):
        raise ValueError('an opcode on a short stack')
    items = stack[-count:]
    del stack[-count:]
    return items


def _set_items(target, pairs):
    if isinstance(target, Dict):
        target.items.extend(pairs)
    elif isinstance(target, _Built):
        target.dictitems.extend(pairs)
    else:
        raise ValueError(f'SETITEM on {type(target).__name__}')


def _append(target, values):
    if isinstance(target, list):
        target.extend(values)
    elif isinstance(target, _Built):
        target.listitems.extend(values)
    else:
        raise ValueError(f'APPEND on {type(target).__name__}')


def _reduce(function, args):
    """What REDUCE leaves: the value of a pure reduction Python's pickles
    use for plain values, else a Call."""
    if isinstance(function, Global) and isinstance(args, tuple):
        where, name = function.module, function.name
        if ((where, name) == ('_codecs', 'encode') and len(args) == 2
                and isinstance(args[0], str)
                and args[1] in ('latin1', 'latin-1')):
            return args[0].encode('latin-1')
        if where in _BUILTINS and name in ('set', 'frozenset'):
            if not args:
                return Set(frozen=name == 'frozenset')
            if len(args) == 1 and isinstance(args[0], (list, tuple)):
                return Set(args[0], frozen=name == 'frozenset')
        if where in _BUILTINS and name == 'bytearray':
            if not args:
                return bytearray()
            if len(args) == 1 and isinstance(args[0], bytes):
                return bytearray(args[0])
            if (len(args) == 2 and isinstance(args[0], str)
                    and args[1] in ('latin1', 'latin-1')):
                return bytearray(args[0].encode('latin-1'))
        if where in _COPYREG and name == '_reconstructor' and len(args) == 3:
            # copyreg._reconstructor(cls, base, state): an object of cls;
            # state, when not None, is the value of a built-in base.
            made = Instance(args[0], () if args[2] is None else (args[2],))
            return made
        if where in _COPYREG and name == '__newobj__' and args:
            return Instance(args[0], tuple(args[1:]))
    return Call(function, args)


def _instantiate(cls, args):
    """INST and OBJ (protocols 0 and 1): an object made without calling
    its class when there are no arguments, else a call of the class (as
    Python's unpickler does)."""
    return Call(cls, args) if args else Instance(cls)


def _one(stream, memo, budget, on_ref):
    """The value of the pickle at ``stream``'s position (left after its
    STOP), with the ``memo`` of the pickles before it."""
    stack = []
    for opcode, arg, _ in pickletools.genops(stream):
        budget[0] -= 1
        if budget[0] < 0:
            raise TooLarge('more opcodes than the limit')
        name = opcode.name
        if name in _VALUES:
            stack.append(arg)
        elif name in _CONSTANTS:
            stack.append(_CONSTANTS[name])
        elif name in _IGNORED:
            pass
        elif name == 'MARK':
            stack.append(_MARK)
        elif name == 'POP':
            if stack and stack[-1] is _MARK:
                stack.pop()
            else:
                _pop(stack)
        elif name == 'POP_MARK':
            _pop_mark(stack)
        elif name == 'DUP':
            stack.append(_pop(stack)[0])
            stack.append(stack[-1])
        elif name in _PUTS:
            memo[arg] = _pop(stack)[0]
            stack.append(memo[arg])
        elif name == 'MEMOIZE':
            value = _pop(stack)[0]
            memo[len(memo)] = value
            stack.append(value)
        elif name in _GETS:
            if arg not in memo:
                raise ValueError(f'memo key {arg!r} not set')
            stack.append(memo[arg])
        elif name in _TUPLES:
            stack.append(tuple(_pop(stack, _TUPLES[name])))
        elif name == 'TUPLE':
            stack.append(tuple(_pop_mark(stack)))
        elif name == 'EMPTY_LIST':
            stack.append([])
        elif name == 'LIST':
            stack.append(_pop_mark(stack))
        elif name == 'APPEND':
            value = _pop(stack)[0]
            _append(stack[-1] if stack else None, [value])
        elif name == 'APPENDS':
            values = _pop_mark(stack)
            _append(stack[-1] if stack else None, values)
        elif name == 'EMPTY_DICT':
            stack.append(Dict())
        elif name == 'DICT':
            items = _pop_mark(stack)
            stack.append(Dict(list(zip(items[::2], items[1::2]))))
        elif name == 'SETITEM':
            key, value = _pop(stack, 2)
            _set_items(stack[-1] if stack else None, [(key, value)])
        elif name == 'SETITEMS':
            items = _pop_mark(stack)
            if len(items) % 2:
                raise ValueError('SETITEMS with an odd number of items')
            _set_items(stack[-1] if stack else None,
                       list(zip(items[::2], items[1::2])))
        elif name == 'EMPTY_SET':
            stack.append(Set())
        elif name == 'ADDITEMS':
            items = _pop_mark(stack)
            if not stack or not isinstance(stack[-1], Set):
                raise ValueError('ADDITEMS on something not a set')
            stack[-1].items.extend(items)
        elif name == 'FROZENSET':
            stack.append(Set(_pop_mark(stack), frozen=True))
        elif name == 'BYTEARRAY8':
            stack.append(bytearray(arg))
        elif name == 'GLOBAL':
            module, _, attribute = arg.partition(' ')
            stack.append(Global(module, attribute))
        elif name == 'STACK_GLOBAL':
            module, attribute = _pop(stack, 2)
            if not (isinstance(module, str) and isinstance(attribute, str)):
                raise ValueError('STACK_GLOBAL of values that are not text')
            stack.append(Global(module, attribute))
        elif name == 'REDUCE':
            function, args = _pop(stack, 2)
            stack.append(_reduce(function, args))
        elif name == 'NEWOBJ':
            cls, args = _pop(stack, 2)
            stack.append(Instance(cls, args))
        elif name == 'NEWOBJ_EX':
            cls, args, kwargs = _pop(stack, 3)
            stack.append(Instance(cls, args, kwargs))
        elif name == 'OBJ':
            items = _pop_mark(stack)
            if not items:
                raise ValueError('OBJ without a class')
            stack.append(_instantiate(items[0], tuple(items[1:])))
        elif name == 'INST':
            module, _, attribute = arg.partition(' ')
            stack.append(_instantiate(Global(module, attribute),
                                      tuple(_pop_mark(stack))))
        elif name == 'BUILD':
            state = _pop(stack)[0]
            target = stack[-1] if stack else None
            if not isinstance(target, _Built):
                raise ValueError(f'BUILD on {type(target).__name__}')
            target.state = state
        elif name in ('PERSID', 'BINPERSID'):
            pid = arg if name == 'PERSID' else _pop(stack)[0]
            if on_ref is not None:
                on_ref(pid)
            stack.append(Ref(pid))
        elif name in ('EXT1', 'EXT2', 'EXT4'):
            # The copyreg extension registry: a code, not a name.
            stack.append(Call(Global('copyreg', 'extension'), (arg,)))
        elif name == 'STOP':
            if len(stack) != 1 or stack[0] is _MARK:
                raise ValueError(f'STOP with {len(stack)} values on the '
                                 f'stack')
            return stack[0]
        else:
            # NEXT_BUFFER, READONLY_BUFFER (out-of-band buffers, which a
            # stored record cannot carry) and whatever a later protocol
            # adds.
            raise ValueError(f'the opcode {name} is not read here')
    raise ValueError('a pickle without STOP')


# -- the same, by Python's C unpickler ---------------------------------------

class _GlobalType(type):
    """The type of what ``read_record_fast`` resolves a global to: a class
    made here, named after the global, whose call (REDUCE, INST, OBJ)
    describes a Call and whose ``__new__`` (NEWOBJ) an Instance.  Nothing
    of the global's module is imported."""

    def __call__(cls, *args):
        return Call(cls.global_, args)


def _new_instance(cls, *args, **kwargs):
    return Instance(cls.global_, args, kwargs or None)


_GLOBAL_TYPES = {}


def _global_type(module, name):
    key = (module, name)
    made = _GLOBAL_TYPES.get(key)
    if made is None:
        if len(_GLOBAL_TYPES) > 10000:
            _GLOBAL_TYPES.clear()   # bounded, whatever the data names
        made = _GLOBAL_TYPES[key] = _GlobalType(
            'Global', (), {'__slots__': (), '__new__': _new_instance,
                           'global_': Global(module, name)})
    return made


def as_global(value):
    """The Global that ``value`` stands for when it is a global's
    stand-in made by ``read_record_fast``, else None."""
    return value.global_ if isinstance(value, _GlobalType) else None


def _plain(value):
    """A global's stand-in (a class made by _global_type) as the Global
    it stands for; anything else as it is (one level of tuples and lists,
    as persistent ids and reconstructor arguments hold them)."""
    if isinstance(value, _GlobalType):
        return value.global_
    if isinstance(value, tuple):
        return tuple(_plain(v) if isinstance(v, _GlobalType) else v
                     for v in value)
    if isinstance(value, list):
        return [_plain(v) if isinstance(v, _GlobalType) else v
                for v in value]
    return value


def _codecs_encode(*args):
    if (len(args) == 2 and isinstance(args[0], str)
            and args[1] in ('latin1', 'latin-1')):
        return args[0].encode('latin-1')
    return Call(Global('_codecs', 'encode'), args)


def _set(*args):
    return _reduce(Global('builtins', 'set'), args)


def _frozenset(*args):
    return _reduce(Global('builtins', 'frozenset'), args)


def _bytearray(*args):
    return _reduce(Global('builtins', 'bytearray'), args)


def _reconstructor(*args):
    return _reduce(Global('copyreg', '_reconstructor'), _plain(args))


def _newobj(*args):
    return _reduce(Global('copyreg', '__newobj__'), _plain(args))


#: The globals whose reductions are plain values (see _reduce), worked out
#: by functions of this module.
_PURE = {
    ('_codecs', 'encode'): _codecs_encode,
    ('builtins', 'set'): _set, ('__builtin__', 'set'): _set,
    ('builtins', 'frozenset'): _frozenset,
    ('__builtin__', 'frozenset'): _frozenset,
    ('builtins', 'bytearray'): _bytearray,
    ('__builtin__', 'bytearray'): _bytearray,
    ('copyreg', '_reconstructor'): _reconstructor,
    ('copy_reg', '_reconstructor'): _reconstructor,
    ('copyreg', '__newobj__'): _newobj,
}


class _Unpickler(pickle.Unpickler):
    """Python's C unpickler, with every global resolved here (never
    imported) and every persistent id kept as a Ref.  What it runs while
    loading is only what find_class returns (the functions and classes
    of this module) and the methods of the objects those make."""

    def find_class(self, module, name):
        return _PURE.get((module, name)) or _global_type(module, name)

    def persistent_load(self, pid):
        if (type(pid) is tuple and len(pid) == 2
                and type(pid[1]) is _GlobalType):
            # ZODB's usual form, (oid, class): the quick way.
            return Ref((pid[0], pid[1].global_))
        return Ref(_plain(pid))


def read_record_fast(data):
    """``read_record``'s values, by Python's C unpickler (about thirty
    times as fast).  Dicts, sets and frozensets are Python's own (a set's
    order is not the pickle's); a global is a Global.  Raises whatever
    the unpickler raises on data it cannot read: the caller then reads
    the record with ``read_record``, which says why."""
    stream = io.BytesIO(data)
    # One memo for both pickles, as ZODB writes them.
    unpickler = _Unpickler(stream, fix_imports=False, encoding='latin-1')
    values = []
    while stream.tell() < len(data):
        values.append(_plain(unpickler.load()))
    if not values:
        raise ValueError('an empty record')
    return values
