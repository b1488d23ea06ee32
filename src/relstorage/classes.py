"""Which classes a pickle may name when ZODB loads it: an allow-list.

A pickle can name any importable callable, and unpickling calls what it
names: whoever can write to the database can make every client run code.
ZODB resolves every global of a record it loads (the class, and any
class or function in the state) through its database's class factory
(``ZODB.DB(class_factory=...)``, ``class-factory`` in a ``<zodb>``
section).  ``allowed`` is such a factory: it resolves the names the
storage's ``allowed-classes`` option admits, as ZODB would, and refuses
any other with ``ClassNotAllowedError``, which names it, before anything
is imported::

    <zodb>
      class-factory relstorage.classes.allowed
      <relstorage>
        allowed-classes myapp.* persistent.* BTrees.*
        ...
      </relstorage>
    </zodb>

From Python, ``ZODB.DB(storage, class_factory=AllowList([...]))`` takes
a list of its own.  Each entry is ``module.Class`` (that name only) or
``package.*`` (every name in the module or package and below).
``SAFE`` is admitted always: the classes Python's pickles use for plain
values (``set``, ``datetime``, ``Decimal``...), never a builtin that runs
code such as ``eval`` or ``getattr``.

May import the base only.
"""
import re

from ZODB.broken import find_global

from relstorage.errors import ClassNotAllowedError
from relstorage.errors import ConfigurationError

#: What pickles of plain values name, admitted whatever the list says.
SAFE = frozenset((
    'builtins.set', 'builtins.frozenset', 'builtins.bytearray',
    'builtins.list', 'builtins.dict', 'builtins.tuple', 'builtins.object',
    'builtins.complex', 'builtins.slice', 'builtins.range',
    '__builtin__.set', '__builtin__.frozenset', '__builtin__.bytearray',
    '__builtin__.list', '__builtin__.dict', '__builtin__.object',
    '_codecs.encode', 'copy_reg._reconstructor', 'copyreg._reconstructor',
    'copyreg.__newobj__', 'datetime.datetime', 'datetime.date',
    'datetime.time', 'datetime.timedelta', 'datetime.timezone',
    'decimal.Decimal', 'collections.OrderedDict', 'collections.deque',
    'uuid.UUID',
))

_ENTRY = re.compile(r'^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*(\.\*)?$')


def parse(key, text):
    """The entries of an allow-list written as text (separated by
    whitespace or commas), each checked; ``key`` names the option in
    the error."""
    entries = tuple(e for e in re.split(r'[\s,]+', text or '') if e)
    for entry in entries:
        if not _ENTRY.match(entry) or ('.' not in entry):
            raise ConfigurationError(
                f'{key}: {entry!r} is neither module.Class nor package.*')
    return entries


class AllowList:
    """A class factory (``class_factory(connection, module, name)``) that
    resolves the names ``entries`` admit, with ZODB's own
    ``find_global``, and raises ClassNotAllowedError for the others."""

    def __init__(self, entries):
        self.entries = tuple(entries)
        self._names = frozenset(e for e in self.entries
                                if not e.endswith('.*'))
        self._prefixes = tuple(e[:-1] for e in self.entries
                               if e.endswith('.*'))

    def admits(self, module, name):
        dotted = f'{module}.{name}'
        return (dotted in SAFE or dotted in self._names
                or (module + '.').startswith(self._prefixes))

    def __call__(self, connection, module, name):
        if not self.admits(module, name):
            raise ClassNotAllowedError(module, name)
        return find_global(module, name)


def allowed(connection, module, name):
    """The class factory that reads the allow-list from the storage of
    ``connection``'s database (its ``allowed-classes`` option; an empty
    one admits everything, as ZODB does)."""
    factory = _factory_of(connection.db().storage)
    if factory is None:
        return find_global(module, name)
    return factory(connection, module, name)


def _factory_of(storage):
    """The AllowList of a relstorage's options (kept on the storage),
    looking through wrappers (``base``); None when the list is empty or
    the storage is not a relstorage."""
    for _ in range(10):
        factory = getattr(storage, 'class_allow_list', None)
        if factory is not None or not hasattr(storage, 'base'):
            return factory or None
        storage = storage.base
    return None
