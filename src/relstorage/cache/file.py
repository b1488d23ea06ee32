"""The file of the persistent local cache (``cache-local-dir``).

:meth:`relstorage.cache.local.LocalCache.save` writes one with
:func:`write_file`; the storage opens it with :func:`open_file` when it
opens (``relstorage.cache.persistent``) and the cache reads its records
(:meth:`relstorage.cache.local.LocalCache.restore_file`).
"""
import logging
import mmap
import os
import struct
import tempfile
import zlib

log = logging.getLogger(__name__)

# The file: _HEAD, the identity in UTF-8, _HORIZON, then per entry a RECORD
# and its payload, then the CRC-32 of everything before it.  No pickles, so
# loading a file cannot run code.
_MAGIC = b'RSLCACHE'
_VERSION = 1
_HEAD = struct.Struct('>8sHH')      # magic, version, identity length
_HORIZON = struct.Struct('>QQ')     # saved horizon, number of records
RECORD = struct.Struct('>QQBI')     # oid, tid, kind, payload length
_CRC = struct.Struct('>I')
RAW, ZLIB, DELETED = 0, 1, 2


def identity_bytes(identity):
    """``identity`` (a str naming the database) as written in a file;
    raises ValueError when longer than 65535 bytes in UTF-8."""
    name = identity.encode('utf-8')
    if len(name) > 0xFFFF:
        raise ValueError('cache file identity longer than 65535 bytes')
    return name


def write_file(path, name, horizon, count, records):
    """Replace ``path`` atomically with a file of ``count`` ``records``,
    each ``(oid, tid, payload, zipped)``: the payload None for a deleted
    object, zlib's output when ``zipped``.  ``name`` comes from
    :func:`identity_bytes`.  Raises OSError when the file cannot be
    written; a crash leaves the previous file."""
    parts = [_HEAD.pack(_MAGIC, _VERSION, len(name)), name,
             _HORIZON.pack(horizon, count)]
    append = parts.append
    pack = RECORD.pack
    for oid, tid, payload, zipped in records:
        if payload is None:
            append(pack(oid, tid, DELETED, 0))
        else:
            append(pack(oid, tid, ZLIB if zipped else RAW, len(payload)))
            append(payload)
    body = b''.join(parts)
    directory, base = os.path.split(os.path.abspath(path))
    fd, temp = tempfile.mkstemp(prefix=base + '.', suffix='.tmp',
                                dir=directory)
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(body)
            f.write(_CRC.pack(zlib.crc32(body)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


class _BadFile(Exception):
    pass


class CacheFile:
    """A cache file mapped (or read) and checked (its identity, format
    and checksum), its records not parsed yet: ``horizon`` (the saved
    G), ``count`` (records), ``data`` (the file's bytes) and ``start``
    and ``end`` (where the records lie in it).  Each record is a header
    ``RECORD`` (oid, tid, kind, payload length) and its payload: the
    state (``RAW``), zlib's output (``ZLIB``), or nothing (``DELETED``,
    a deleted object)."""

    def __init__(self, data, horizon, count, start, end):
        self.data, self.horizon, self.count = data, horizon, count
        self.start, self.end = start, end

    def records(self, limit=None):
        """``[(oid, tid, state), ...]``, most valuable first (the first
        ``limit`` only, when given); a state is bytes-like (a view of the
        file's contents where it was not compressed).  Raises ValueError
        when the records do not fill the file exactly."""
        data, pos = self.data, self.start
        unpack = RECORD.unpack_from
        step = RECORD.size
        decompress = zlib.decompress
        # States as views of the file's bytes, not copies: the cache
        # copies what it keeps (relstorage.cache.local.LocalCache).
        view = memoryview(data)
        count = self.count if limit is None else min(limit, self.count)
        entries = []
        append = entries.append
        for _ in range(count):
            oid, tid, kind, length = unpack(data, pos)
            pos += step
            if kind == RAW:
                state = view[pos:pos + length]
                pos += length
            elif kind == DELETED:
                state = None
            elif kind == ZLIB:
                state = decompress(view[pos:pos + length])
                pos += length
            else:
                raise ValueError(f'unknown record kind {kind}')
            append((oid, tid, state))
        # (Only a whole parse can tell whether the lengths add up.)
        if count == self.count and pos != self.end:
            raise ValueError('record lengths do not add up')
        return entries


def open_file(path, identity):
    """The CacheFile at ``path`` written by :func:`write_file` for
    ``identity``, checked but not parsed; None, never raising, when the
    file is missing, unreadable, damaged, truncated, of another format
    version or another identity (all but a missing file logged as
    warnings)."""
    try:
        data = _contents(path)
    except FileNotFoundError:
        log.debug('No persistent cache file %s', path)
        return None
    except OSError as e:
        log.warning('Ignoring persistent cache file %s: %s', path, e)
        return None
    try:
        return _check(data, identity)
    except (_BadFile, struct.error, UnicodeError) as e:
        log.warning('Ignoring persistent cache file %s: %s', path, e)
        return None


#: How the file is mapped (None: read, where the system has no mmap).
_MAP_FLAGS = (mmap.MAP_SHARED | getattr(mmap, 'MAP_POPULATE', 0)
              if hasattr(mmap, 'MAP_SHARED') else None)


def _contents(path):
    """The file's bytes: mapped where the system can (the page cache's
    own pages, populated at once: a file of a million entries, 785 MB,
    is there and checked in 0.3 s instead of 1.1 read into fresh memory),
    else read.  (Writers replace the file, never rewrite it in place: a
    mapping keeps the contents it began with.)"""
    with open(path, 'rb') as f:
        if _MAP_FLAGS is not None:
            try:
                return mmap.mmap(f.fileno(), 0, flags=_MAP_FLAGS,
                                 prot=mmap.PROT_READ)
            except (ValueError, OSError):
                pass    # empty, or a file system that cannot map it
        return f.read()


def read_file(path, identity):
    """``(saved_horizon, [(oid, tid, state), ...])`` from a file written by
    :func:`write_file` for ``identity``, most valuable first (see
    CacheFile.records); None, never raising, for a file ``open_file``
    refuses or whose records do not parse (logged as a warning)."""
    found = open_file(path, identity)
    if found is None:
        return None
    try:
        return found.horizon, found.records()
    except (ValueError, struct.error, zlib.error) as e:
        log.warning('Ignoring persistent cache file %s: %s', path, e)
        return None


def _check(data, identity):
    if len(data) < _HEAD.size + _HORIZON.size + _CRC.size:
        raise _BadFile('too short')
    magic, version, name_len = _HEAD.unpack_from(data)
    if magic != _MAGIC:
        raise _BadFile('not a cache file')
    if version != _VERSION:
        raise _BadFile(f'format version {version}, expected {_VERSION}')
    end = len(data) - _CRC.size
    if zlib.crc32(memoryview(data)[:end]) != _CRC.unpack_from(data, end)[0]:
        raise _BadFile('checksum mismatch (truncated or damaged)')
    pos = _HEAD.size
    name = data[pos:pos + name_len].decode('utf-8')
    if name != identity:
        raise _BadFile(f'written for {name!r}, not {identity!r}')
    horizon, count = _HORIZON.unpack_from(data, pos + name_len)
    pos += name_len + _HORIZON.size
    return CacheFile(data, horizon, count, pos, end)
