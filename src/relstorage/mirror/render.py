"""A stored record rendered as JSON, from its pickles read as data.

``render(data)`` gives the class of the record (module and name, as the
pickle names it) and its state as JSON text, or None for the JSON where
the record cannot be rendered (``Rendering.error`` says why): a damaged
pickle, a value nested deeper than ``MAX_DEPTH``, a value that contains
itself, a rendering longer than ``MAX_CHARS``.  Nothing is imported and
nothing from the data runs (``relstorage.pickles``).

JSON's own values stand for themselves: None, booleans, numbers, text,
lists, and dicts whose keys are all text.  The rest is an object with one
key that starts with ``!`` (docs/json.rst lists them):

``{"!b": BASE64}``, ``{"!ba": BASE64}``
    bytes, bytearray.
``{"!t": [...]}``, ``{"!set": [...]}``, ``{"!fset": [...]}``
    tuple, set, frozenset (a set's items in the pickle's order).
``{"!d": [[KEY, VALUE], ...]}``
    a dict with a key that is not text, or that starts with ``!``.
``{"!text": BASE64}``
    text that JSON columns refuse (a NUL, a lone surrogate): its UTF-8.
``{"!float": "nan" | "inf" | "-inf"}``
``{"!ref": OID}``
    a persistent reference (OID an integer), with ``"!class"`` when the
    pickle names the class, ``"!weak": true`` for a weak reference,
    ``"!db"`` for another database's object; ``{"!pid": ...}`` for a
    persistent id of another form.
``{"!dt": ISO}``, ``{"!date": ISO}``, ``{"!time": ISO}``, ``{"!td": [D, S, US]}``
    datetime values (``"!tz"`` beside a datetime or time whose zone is
    not a fixed offset); ``{"!dec": TEXT}`` a Decimal.
``{"!global": "module.name"}``
    a class or function as a value.
``{"!obj": "module.name", "!args": [...], "!state": ..., "!items": [...], "!pairs": [[K, V], ...]}``
    an object of a class that is not persistent, pickled within the
    record (what is empty is left out).
``{"!call": "module.name", "!args": [...], ...}``
    another reduction: what an unpickler would call, never called.
"""
import base64
import datetime
import json
import math
import re

from relstorage.pickles import Call
from relstorage.pickles import Dict
from relstorage.pickles import Global
from relstorage.pickles import Instance
from relstorage.pickles import Ref
from relstorage.pickles import Set
from relstorage.pickles import as_global
from relstorage.pickles import read_record
from relstorage.pickles import read_record_fast

#: Containers within containers past which a state is not rendered.
MAX_DEPTH = 200
#: The longest JSON text rendered (characters, about), past which a state
#: is not rendered.
MAX_CHARS = 16 * 1024 * 1024


class Unrenderable(ValueError):
    """Why a state has no JSON."""


class Rendering:
    """What ``render`` found: ``module`` and ``name`` of the class (None
    when unknown), ``json`` (text, or None) and ``error`` (None, or why
    there is no JSON)."""

    __slots__ = ('module', 'name', 'json', 'error')

    def __init__(self, module, name, json_text, error=None):
        self.module, self.name = module, name
        self.json, self.error = json_text, error

    def __repr__(self):
        return (f'Rendering({self.module}.{self.name}, '
                f'{self.error or (self.json or "")[:60]!r})')


def render(data):
    """The record ``data`` (class pickle, state pickle) as a Rendering;
    never raises for what the data holds."""
    try:
        values = read_record_fast(data)
    except Exception:   # noqa: BLE001 - whatever the data does
        # The opcode walk reads what the C unpickler refuses (and says
        # why it cannot, where it cannot).
        try:
            values = read_record(data)
        except Exception as e:   # noqa: BLE001 - whatever the data does
            return Rendering(None, None, None, _reason(e))
    module, name = class_of(values[0])
    if len(values) != 2:
        return Rendering(module, name, None,
                         f'{len(values)} pickles, not a class and a state')
    try:
        text = _dumps(_Renderer(False).value(values[1], 0))
        if not _storable(text):
            # Text with a NUL or a lone surrogate somewhere: again, each
            # string looked at.
            text = _dumps(_Renderer(True).value(values[1], 0))
    except (Unrenderable, ValueError, TypeError, RecursionError) as e:
        return Rendering(module, name, None, _reason(e))
    if len(text) > MAX_CHARS:
        return Rendering(module, name, None, 'longer than the limit')
    return Rendering(module, name, text)


def _dumps(value):
    return json.dumps(value, ensure_ascii=False, allow_nan=False,
                      separators=(',', ':'))


def _storable(text):
    """Whether JSON columns take ``text``: no NUL (which json.dumps
    writes as an escape that PostgreSQL's JSONB refuses), no lone
    surrogate (which no UTF-8 encodes).  A backslash before u0000 in
    some text also fails this: that state is then rendered the slow way,
    to the same JSON."""
    if '\\u0000' in text:
        return False
    try:
        text.encode('utf-8')
    except UnicodeEncodeError:
        return False
    return True


def class_of(value):
    """``(module, name)`` of a class pickle: a class, ``(class, args)``, or
    ZODB's oldest form ``((module, name), args)``; ``(None, None)`` for
    anything else."""
    if isinstance(value, tuple) and value:
        value = value[0]
    if isinstance(value, Global):
        return value.module, value.name
    if (isinstance(value, tuple) and len(value) == 2
            and all(isinstance(v, str) for v in value)):
        return value
    return None, None


def _global_of(value):
    """The Global ``value`` is or stands for, else None."""
    return value if isinstance(value, Global) else as_global(value)


def _reason(error):
    return f'{type(error).__name__}: {error}'[:200]


#: What JSON columns refuse in text: a NUL, a lone surrogate.
_AWKWARD = re.compile('[\x00\ud800-\udfff]')


def _never(text):
    return None


def _b64(data):
    return base64.b64encode(bytes(data)).decode('ascii')


def _oid(value):
    if isinstance(value, str):
        value = value.encode('latin-1')     # Python 2's str
    if isinstance(value, bytes) and len(value) == 8:
        return int.from_bytes(value, 'big')
    return None


class _Renderer:
    """One state's rendering: the size so far, the containers being
    rendered (a value met again inside itself is a cycle), and those
    rendered already with their size: a value the pickle shares (its
    memo) is rendered once and counted at each use, so that a small
    pickle whose shared values expand past any size (lists of ten copies
    of lists of ten copies...) fails at the limit at once, without
    expanding anything."""

    def __init__(self, checked):
        #: Whether each string is looked at for what JSON columns refuse
        #: (else the whole text is, afterwards: see render).
        self.checked = checked
        self.awkward = _AWKWARD.search if checked else _never
        self.chars = 0
        self.open = set()
        self.done = {}

    def grow(self, chars):
        self.chars += chars
        if self.chars > MAX_CHARS:
            raise Unrenderable('longer than the limit')

    def value(self, value, depth):
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is int or kind is bool or value is None:
            self.grow(8)
            return value
        if kind is Ref:
            # (Never shared nor circular: a reference is read anew at
            # each use.)
            return self.reference(value.pid, depth)
        if isinstance(value, int):
            self.grow(8)
            return value
        if isinstance(value, float):
            self.grow(12)
            if math.isfinite(value):
                return value
            return {'!float': 'nan' if math.isnan(value) else
                    ('inf' if value > 0 else '-inf')}
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, (bytes, bytearray)):
            self.grow(len(value) * 4 // 3 + 10)
            tag = '!b' if isinstance(value, bytes) else '!ba'
            return {tag: _b64(value)}
        key = id(value)
        if key in self.done:
            rendered, chars = self.done[key]
            self.grow(chars)
            return rendered
        if depth > MAX_DEPTH:
            raise Unrenderable(f'nested deeper than {MAX_DEPTH}')
        if key in self.open:
            raise Unrenderable('a value that contains itself')
        self.open.add(key)
        before = self.chars
        try:
            rendered = self.container(value, depth + 1)
        finally:
            self.open.discard(key)
        # The values read from one record all live until it is rendered:
        # no id is reused meanwhile.
        self.done[key] = (rendered, self.chars - before)
        return rendered

    def text(self, value):
        self.chars += len(value) + 2
        if self.chars > MAX_CHARS:
            raise Unrenderable('longer than the limit')
        if self.awkward(value) is not None:
            return {'!text': _b64(value.encode('utf-8', 'surrogatepass'))}
        return value

    def items(self, values, depth):
        # JSON's own leaves inline (most of any state): a call less each.
        out = []
        append = out.append
        chars = len(values)
        awkward = self.awkward
        for item in values:
            kind = type(item)
            if kind is str and awkward(item) is None:
                chars += len(item)
                append(item)
            elif kind is int or kind is bool or item is None:
                append(item)
            else:
                append(self.value(item, depth))
        self.grow(chars)
        return out

    def members(self, items, depth):
        """A set's items, in the order of their JSON text: the same
        whatever order the set was pickled or read in."""
        rendered = self.items(items, depth)
        return sorted(rendered, key=lambda v: json.dumps(
            v, sort_keys=True, ensure_ascii=False))

    def pairs(self, items, depth):
        return [[self.value(k, depth), self.value(v, depth)]
                for k, v in items]

    def container(self, value, depth):
        kind = type(value)
        if kind is tuple:
            return {'!t': self.items(value, depth)}
        if kind is dict:
            return self.mapping(list(value.items()), depth)
        if kind is list:
            return self.items(value, depth)
        if isinstance(value, list):
            return self.items(value, depth)
        if isinstance(value, tuple):
            return {'!t': self.items(value, depth)}
        if isinstance(value, dict):
            return self.mapping(list(value.items()), depth)
        if isinstance(value, Dict):
            return self.mapping(value.items, depth)
        if isinstance(value, (Set, set, frozenset)):
            frozen = (value.frozen if isinstance(value, Set)
                      else isinstance(value, frozenset))
            items = value.items if isinstance(value, Set) else list(value)
            return {'!fset' if frozen else '!set': self.members(items,
                                                                depth)}
        if as_global(value) is not None:
            value = as_global(value)
        if isinstance(value, Ref):
            return self.reference(value.pid, depth)
        if isinstance(value, Global):
            self.grow(len(value.dotted) + 12)
            return {'!global': value.dotted}
        if isinstance(value, Call):
            known = _known_call(value, self)
            if known is not None:
                self.grow(40)
                return known
            return self.built('!call', value.function, value.args, value,
                              depth)
        if isinstance(value, Instance):
            out = self.built('!obj', value.cls, value.args, value, depth)
            if value.kwargs:
                out['!kwargs'] = self.value(value.kwargs, depth)
            return out
        raise Unrenderable(f'a value of type {type(value).__name__}')

    def mapping(self, items, depth):
        for key, _ in items:
            if (type(key) is not str or key.startswith('!')
                    or self.awkward(key) is not None):
                return {'!d': self.pairs(items, depth)}
        out = {}
        chars = 0
        awkward = self.awkward
        for key, item in items:
            kind = type(item)
            chars += len(key) + 3
            if kind is str and awkward(item) is None:
                chars += len(item)
                out[key] = item
            elif kind is int or kind is bool or item is None:
                out[key] = item
            else:
                out[key] = self.value(item, depth)
        self.grow(chars)
        return out

    def built(self, tag, what, args, value, depth):
        out = {tag: what.dotted if isinstance(what, Global)
               else self.value(what, depth)}
        if args:
            out['!args'] = (self.items(args, depth)
                            if isinstance(args, (tuple, list))
                            else self.value(args, depth))
        if value.state is not None:
            out['!state'] = self.value(value.state, depth)
        if value.listitems:
            out['!items'] = self.items(value.listitems, depth)
        if value.dictitems:
            out['!pairs'] = self.pairs(value.dictitems, depth)
        return out

    def reference(self, pid, depth):
        """ZODB's forms of persistent id (ZODB.serialize): an oid, ``(oid,
        class)``, ``[oid]`` (a persistent weak reference), ``['w', (oid[,
        database])]``, ``['m', (database, oid, class)]``, ``['n',
        (database, oid)]``."""
        self.grow(30)
        out = None
        if isinstance(pid, tuple) and len(pid) == 2:
            oid = _oid(pid[0])
            if oid is not None:
                out = {'!ref': oid}
                if _global_of(pid[1]) is not None:
                    out['!class'] = _global_of(pid[1]).dotted
        elif isinstance(pid, list) and len(pid) == 1:
            oid = _oid(pid[0])
            if oid is not None:
                out = {'!ref': oid, '!weak': True}
        elif (isinstance(pid, list) and len(pid) == 2
              and isinstance(pid[1], tuple)):
            kind, args = pid
            if kind == 'w' and args and _oid(args[0]) is not None:
                out = {'!ref': _oid(args[0]), '!weak': True}
                if len(args) > 1:
                    out['!db'] = self.value(args[1], depth)
            elif kind == 'm' and len(args) == 3 and _oid(args[1]) is not None:
                out = {'!ref': _oid(args[1]),
                       '!db': self.value(args[0], depth)}
                if _global_of(args[2]) is not None:
                    out['!class'] = _global_of(args[2]).dotted
            elif kind == 'n' and len(args) == 2 and _oid(args[1]) is not None:
                out = {'!ref': _oid(args[1]),
                       '!db': self.value(args[0], depth)}
        else:
            oid = _oid(pid)
            if oid is not None:
                out = {'!ref': oid}
        if out is None:
            out = {'!pid': self.value(pid, depth)}
        return out


# -- values pickled as calls that are plain data -------------------------

def _bytes_arg(value):
    if isinstance(value, str):
        return value.encode('latin-1')      # Python 2's str
    return value if isinstance(value, bytes) else None


def _fixed_zone(tz):
    """A ``datetime.timezone`` of a fixed offset (pickled as a call of
    ``datetime.timezone`` with a timedelta), else None."""
    if not (isinstance(tz, Call) and isinstance(tz.function, Global)
            and tz.function.dotted == 'datetime.timezone' and tz.args
            and len(tz.args) <= 2):
        return None
    delta = _timedelta(tz.args[0])
    if delta is None:
        return None
    return datetime.timezone(delta)


def _timedelta(value):
    if (isinstance(value, Call) and isinstance(value.function, Global)
            and value.function.dotted == 'datetime.timedelta'
            and len(value.args) == 3
            and all(type(a) is int for a in value.args)):
        return datetime.timedelta(*value.args)
    return None


def _known_call(value, renderer):
    """The tagged form of a datetime, date, time, timedelta or Decimal
    pickled as a call of its class, or None.  Built from the pickled
    fields with the datetime module's own constructors (which check
    them): nothing from the data runs."""
    function, args = value.function, value.args
    if not (isinstance(function, Global) and isinstance(args, tuple)
            and value.state is None and not value.listitems
            and not value.dictitems):
        return None
    what = function.dotted
    try:
        if what == 'decimal.Decimal' and len(args) == 1 \
                and isinstance(args[0], str):
            return {'!dec': args[0]}
        if what == 'datetime.timedelta':
            delta = _timedelta(value)
            return None if delta is None else {'!td': list(args)}
        if what not in ('datetime.datetime', 'datetime.date',
                        'datetime.time') or not 1 <= len(args) <= 2:
            return None
        raw = _bytes_arg(args[0])
        tz = args[1] if len(args) == 2 else None
        if raw is None:
            return None
        if what == 'datetime.date' and len(raw) == 4 and tz is None:
            return {'!date': datetime.date(raw[0] * 256 + raw[1], raw[2],
                                           raw[3]).isoformat()}
        zone = _fixed_zone(tz) if tz is not None else None
        if what == 'datetime.datetime' and len(raw) == 10:
            made = datetime.datetime(
                raw[0] * 256 + raw[1], raw[2] & 0x7F, raw[3], raw[4],
                raw[5], raw[6], (raw[7] << 16) | (raw[8] << 8) | raw[9],
                zone, fold=raw[2] >> 7)
            out = {'!dt': made.isoformat()}
        elif what == 'datetime.time' and len(raw) == 6:
            made = datetime.time(
                raw[0] & 0x7F, raw[1], raw[2],
                (raw[3] << 16) | (raw[4] << 8) | raw[5], zone,
                fold=raw[0] >> 7)
            out = {'!time': made.isoformat()}
        else:
            return None
    except (ValueError, OverflowError):
        return None     # fields out of range: rendered as the call
    if tz is not None and zone is None:
        out['!tz'] = renderer.value(tz, 0)
    return out
