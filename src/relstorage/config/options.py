"""The typed options of a RelStorage, one field per ZConfig key.

Defaults are declared once, in ``component.xml``; this module reads them
from there so that the ZConfig schema and the Python API cannot disagree.
Every converter knows the key it converts, so a bad value fails at start-up
with a message that names both the key and the value, whichever way the
storage was configured.
"""
import functools
import logging
import os
import xml.etree.ElementTree as ET


from relstorage.config.replicas import read_servers
from relstorage.errors import ConfigurationError

log = logging.getLogger(__name__)

# component.xml stays at the package's top, where %import relstorage finds it.
_COMPONENT = os.path.join(os.path.dirname(os.path.dirname(__file__)),
                          'component.xml')


def _boolean(key, value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ('true', 'yes', 'on', '1'):
        return True
    if text in ('false', 'no', 'off', '0'):
        return False
    raise ConfigurationError(
        f'{key}: {value!r} is not a boolean (use true or false)')


def _seconds(key, value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number != number or number < 0:
        raise ConfigurationError(
            f'{key}: {value!r} is not a non-negative number of seconds')
    return number


def _integer(key, low, high, value):
    try:
        number = int(str(value).strip())
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise ConfigurationError(
            f'{key}: {value!r} is not a whole number from {low} to {high}')
    return number


def _text(key, value):
    if value is None:
        return ''
    if not isinstance(value, str):
        raise ConfigurationError(f'{key}: {value!r} is not text')
    return value


def _directory(key, value):
    if not isinstance(value, (str, os.PathLike)) or not str(value).strip():
        raise ConfigurationError(f'{key}: {value!r} is not a directory path')
    path = os.path.abspath(os.path.expanduser(str(value)))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigurationError(
            f'{key}: {value!r} exists and is not a directory')
    return path


def _optional_directory(key, value):
    if value is None or (isinstance(value, str) and not value.strip()):
        return ''
    return _directory(key, value)


def _megabytes(key, value):
    try:
        number = float(str(value).strip())
    except ValueError:
        number = None
    if number is None or number != number or not 0 <= number <= 1 << 20:
        raise ConfigurationError(
            f'{key}: {value!r} is not a size in megabytes from 0 to 1048576')
    return number


_SIZE_SUFFIXES = {'kb': 1 << 10, 'mb': 1 << 20, 'gb': 1 << 30, 'tb': 1 << 40}


def _byte_size(key, low, high, value):
    """A number of bytes, with an optional suffix KB, MB, GB or TB (powers
    of 1024, any case) as ZConfig's byte-size and RelStorage 4 accept."""
    text = str(value).strip().lower().replace('_', '')
    factor = 1
    if text[-2:] in _SIZE_SUFFIXES:
        factor = _SIZE_SUFFIXES[text[-2:]]
        text = text[:-2].strip()
    try:
        number = int(text) * factor
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise ConfigurationError(
            f'{key}: {value!r} is not a size in bytes from {low} to {high} '
            f'(a whole number, optionally with KB, MB or GB)')
    return number


def _optional_byte_size(key, low, high, value):
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return _byte_size(key, low, high, value)


def _choice(choices, key, value):
    text = str(value).strip()
    for choice in choices:
        if text.lower() == choice.lower():
            return choice
    raise ConfigurationError(
        f'{key}: {value!r} is not one of {", ".join(choices)}')


# component.xml names these functions as datatypes, e.g.
# ``datatype="relstorage.config.options.commit_lock_timeout"``.
name = functools.partial(_text, 'name')
read_only = functools.partial(_boolean, 'read-only')
keep_history = functools.partial(_boolean, 'keep-history')
create_schema = functools.partial(_boolean, 'create-schema')
commit_lock_timeout = functools.partial(_seconds, 'commit-lock-timeout')
read_ahead = functools.partial(_boolean, 'read-ahead')


def max_connections(value):
    number = _integer('max-connections', 0, 1 << 20, value)
    if 0 < number < 3:
        raise ConfigurationError(
            f'max-connections: {value!r} is too few: 0 (no bound) or at '
            f'least 3 (the read connection of a transaction, the one of '
            f'its commit, and one for reserving object ids)')
    return number
max_connections_wait = functools.partial(_seconds, 'max-connections-wait')
def _replica_file(key, value):
    # Read now, so that a missing or empty file fails at start-up naming
    # the key; the adapter reads it again (it may change later).
    path = _text(key, value)
    if path:
        read_servers(key, path)
    return path or None
replica_conf = functools.partial(_replica_file, 'replica-conf')
ro_replica_conf = functools.partial(_replica_file, 'ro-replica-conf')
replica_timeout = functools.partial(_seconds, 'replica-timeout')
revert_when_stale = functools.partial(_boolean, 'revert-when-stale')
json_state = functools.partial(_boolean, 'json-state')


def allowed_classes(value):
    from relstorage.classes import parse
    # (Imported here: relstorage.classes imports ZODB.broken.)
    if isinstance(value, (tuple, list)):
        value = ' '.join(value)
    return parse('allowed-classes', _text('allowed-classes', value))


pack_gc = functools.partial(_boolean, 'pack-gc')
pack_prepack_only = functools.partial(_boolean, 'pack-prepack-only')
pack_skip_prepack = functools.partial(_boolean, 'pack-skip-prepack')
pack_batch_timeout = functools.partial(_seconds, 'pack-batch-timeout')
pack_commit_busy_delay = functools.partial(_seconds, 'pack-commit-busy-delay')
pack_max_delay = functools.partial(_seconds, 'pack-max-delay')


def pack_duty_cycle(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not 0.0 < number <= 1.0:
        raise ConfigurationError(
            f'pack-duty-cycle: {value!r} is not a fraction greater than 0 '
            f'and at most 1')
    return number
cache_local_mb = functools.partial(_megabytes, 'cache-local-mb')
# A size, as RelStorage 4 took it ("16KB"); a bare number is bytes.
cache_local_object_max = functools.partial(
    _byte_size, 'cache-local-object-max', 0, 1 << 30)


def cache_local_compression(value):
    if str(value).strip().lower() == 'bz2':
        # RelStorage 4 offered bz2 too; the cache here compresses with
        # zlib only (its file format records that).
        log.warning('cache-local-compression bz2 (RelStorage 4) is not '
                    'offered: zlib is used')
        return 'zlib'
    return _choice(('none', 'zlib'), 'cache-local-compression', value)
cache_local_dir = functools.partial(_optional_directory, 'cache-local-dir')
blob_dir = functools.partial(_optional_directory, 'blob-dir')
shared_blob_dir = functools.partial(_boolean, 'shared-blob-dir')
blob_cache_size = functools.partial(
    _optional_byte_size, 'blob-cache-size', 0, 1 << 60)
blob_cache_size_check = functools.partial(
    _integer, 'blob-cache-size-check', 1, 100)
blob_cache_size_check_external = functools.partial(
    _boolean, 'blob-cache-size-check-external')
blob_chunk_size = functools.partial(
    _byte_size, 'blob-chunk-size', 4096, 512 << 20)
data_dir = functools.partial(_directory, 'data-dir')
sqlite_driver = functools.partial(_choice, ('auto', 'sqlite3'), 'driver')
dsn = functools.partial(_text, 'dsn')
postgresql_driver = functools.partial(
    _choice, ('auto', 'psycopg2', 'psycopg'), 'driver')
transaction_pooler = functools.partial(_boolean, 'transaction-pooler')
mysql_driver = functools.partial(
    _choice, ('auto', 'mysqlclient', 'PyMySQL'), 'driver')
oracle_driver = functools.partial(
    _choice, ('auto', 'oracledb', 'cx_Oracle'), 'driver')
password = functools.partial(_text, 'password')
host = functools.partial(_text, 'host')
user = functools.partial(_text, 'user')
passwd = functools.partial(_text, 'passwd')
db = functools.partial(_text, 'db')
unix_socket = functools.partial(_text, 'unix_socket')
read_default_file = functools.partial(_text, 'read_default_file')
read_default_group = functools.partial(_text, 'read_default_group')
port = functools.partial(_integer, 'port', 1, 65535)
connect_timeout = functools.partial(_integer, 'connect_timeout', 1, 86400)


# RelStorage 4's options that mean nothing here: accepted (so that its
# configurations open unchanged) and named in a warning at start-up, with
# what takes their place (``ignored``).
poll_interval = functools.partial(_seconds, 'poll-interval')
cache_servers = functools.partial(_text, 'cache-servers')
cache_module_name = functools.partial(_text, 'cache-module-name')
cache_prefix = functools.partial(_text, 'cache-prefix')
cache_local_storage = functools.partial(_text, 'cache-local-storage')
cache_local_dir_count = functools.partial(
    _integer, 'cache-local-dir-count', 0, 1 << 20)
cache_local_dir_read_count = functools.partial(
    _integer, 'cache-local-dir-read-count', 0, 1 << 20)
cache_local_dir_compress = functools.partial(
    _boolean, 'cache-local-dir-compress')
cache_local_dir_write_max_size = functools.partial(
    _byte_size, 'cache-local-dir-write-max-size', 0, 1 << 60)
cache_delta_size_limit = functools.partial(
    _integer, 'cache-delta-size-limit', 0, 1 << 40)
commit_lock_id = functools.partial(_integer, 'commit-lock-id', 0, 1 << 63)
compress = functools.partial(_boolean, 'compress')
named_pipe = functools.partial(_boolean, 'named_pipe')
gevent_yield_interval = functools.partial(
    _integer, 'gevent_yield_interval', 0, 1 << 40)

_SHARED_CACHE = ('the shared local cache (cache-local-mb) serves every '
                 'connection of a process, and polling keeps it current')
#: option -> why it is ignored, and what takes its place.
IGNORED = {
    'poll-interval': 'each transaction polls for changes when it starts',
    'cache-servers': 'memcached is not used: ' + _SHARED_CACHE,
    'cache-module-name': 'memcached is not used: ' + _SHARED_CACHE,
    'cache-prefix': 'memcached is not used, and the persistent cache of '
                    'cache-local-dir names its file after the database',
    'cache-local-storage': 'the local cache has one implementation '
                           '(cache-local-mb, cache-local-object-max)',
    'cache-local-dir-count': 'cache-local-dir holds one file per database',
    'cache-local-dir-read-count': 'cache-local-dir holds one file per '
                                  'database',
    'cache-local-dir-compress': 'the cache file holds what the local cache '
                                'holds, compressed as cache-local-'
                                'compression says',
    'cache-local-dir-write-max-size': 'the cache file holds at most what '
                                      'the local cache holds '
                                      '(cache-local-mb)',
    'cache-delta-size-limit': 'polling invalidates the local cache from '
                              'the database, not from a map of changes',
    'commit-lock-id': 'the commit lock is a row lock (commit_row; on '
                      'SQLite the database\'s write lock), not a lock '
                      'with an id',
}


def ignored(options):
    """``(option, why)`` for each RelStorage 4 option of ``IGNORED`` that
    ``options`` sets."""
    return [(key, why) for key, why in IGNORED.items()
            if getattr(options, key.replace('-', '_'), None) is not None]


#: Keys of the <relstorage> section that RelStorage 4 spelled otherwise:
#: its spelling -> ours.  component.xml declares each under RelStorage 4's
#: name with the attribute ``rs4_<name>``; ZConfig then accepts both lines,
#: and ``Options.from_section`` takes whichever was given.  The Python API
#: needs none of this: it takes ``_`` and ``-`` alike.
RS4_SPELLINGS = {'revert_when_stale': 'revert-when-stale'}


def _rs4_attribute(spelling):
    return 'rs4_' + spelling.replace('-', '_')


@functools.lru_cache(maxsize=None)
def section_keys(section):
    """Return ``{key: (datatype, default)}`` for one section type of
    component.xml, with the defaults as written there (strings or None).
    RelStorage 4's other spellings of a key (``RS4_SPELLINGS``) are left
    out: they are the same option."""
    root = ET.parse(_COMPONENT).getroot()
    for sectiontype in root.iter('sectiontype'):
        if sectiontype.get('name') == section:
            return {
                key.get('name'): (key.get('datatype'), key.get('default'))
                for key in sectiontype.findall('key')
                if key.get('name') != '+'
                and key.get('name') not in RS4_SPELLINGS
            }
    raise KeyError(section)


def _converter(datatype):
    module, _, attr = datatype.rpartition('.')
    assert module == __name__, datatype
    return globals()[attr]


def convert_section(section, values):
    """Convert keyword arguments (with ``_`` or ``-`` in their names) for one
    section of component.xml, filling in its defaults.

    Returns a dict keyed by attribute name (``commit_lock_timeout``).
    Unknown names raise ConfigurationError; so does a missing required key.
    """
    keys = section_keys(section)
    attrs = {key.replace('-', '_'): key for key in keys}
    given = {k.replace('-', '_'): v for k, v in values.items()}
    unknown = sorted(set(given) - set(attrs))
    if unknown:
        raise ConfigurationError(
            f'unknown {section} option(s): {", ".join(unknown)}; '
            f'known: {", ".join(sorted(keys))}')
    result = {}
    for attr, key in attrs.items():
        datatype, default = keys[key]
        value = given.get(attr, default)
        if value is None:
            result[attr] = None
        else:
            result[attr] = _converter(datatype)(value)
    return result


class Options:
    """The options of a ``<relstorage>`` section, as attributes.

    ``Options(keep_history=False)`` gives the defaults of component.xml for
    every key not named.  Attribute names are the keys with ``_`` for ``-``.
    """

    __slots__ = tuple(k.replace('-', '_') for k in section_keys('relstorage'))

    def __init__(self, **kwargs):
        for attr, value in convert_section('relstorage', kwargs).items():
            setattr(self, attr, value)

    @classmethod
    def from_section(cls, section):
        """Build from a ZConfig section value (already converted)."""
        self = cls.__new__(cls)
        for attr in cls.__slots__:
            setattr(self, attr, getattr(section, attr))
        keys = section_keys('relstorage')
        for spelling, key in RS4_SPELLINGS.items():
            theirs = getattr(section, _rs4_attribute(spelling), None)
            if theirs is None:
                continue
            attr = key.replace('-', '_')
            ours = getattr(self, attr)
            datatype, default = keys[key]
            # ZConfig filled in our key's default when the line is absent:
            # a value other than the default was written.
            if ours != theirs and ours != _converter(datatype)(default):
                raise ConfigurationError(
                    f'{key} {ours!r} and {spelling} (RelStorage 4\'s '
                    f'spelling of the same option) {theirs!r} disagree: '
                    f'give one of them')
            setattr(self, attr, theirs)
        return self

    def copy(self, **changes):
        values = {attr: getattr(self, attr) for attr in self.__slots__}
        values.update(changes)
        return type(self)(**values)

    def __eq__(self, other):
        return (isinstance(other, Options) and all(
            getattr(self, a) == getattr(other, a) for a in self.__slots__))

    def __repr__(self):
        fields = ', '.join(
            f'{a}={getattr(self, a)!r}' for a in self.__slots__)
        return f'Options({fields})'
