"""The blob cache of one machine (``shared-blob-dir false``).

``blob-dir`` holds copies of blobs kept in the database, in ZODB's layout,
filled when a blob is read and when this machine commits one.  Several
processes may share one cache directory:

* a file appears only whole: it is written under a temporary name beside
  its place and renamed into it;
* a reader that opens a cached blob (``openCommittedBlobFile``, which is
  what ``Blob.open`` uses) holds a shared ``flock`` on it while it is
  open, and the trimmer removes only files on which it gets an exclusive
  one: a blob in use is never deleted under its reader;
* ``loadBlob`` hands out a file name that the application opens later
  (``Blob.committed()``; Plone streams a download by name): a file used in
  the last ``RECENT_USE`` seconds is never trimmed, so a cache that is too
  small for what is being read gets slower, and larger than its size for a
  while, but never fails a reader;
* the last use of a file is its access time, set explicitly at every use
  (``relatime`` mounts would otherwise not record it); recording it and
  the trimmer's decision to remove a file exclude each other (``flock``),
  so a use that the trimmer did not see finds the file removed and
  downloads it again;
* trimming keeps the cache within ``blob-cache-size``, least recently used
  first.  Each process counts what it writes into the cache and starts a
  trim (in a thread, or with ``blob-cache-size-check-external`` in a
  process of its own) each time ``blob-cache-size-check`` percent of the
  size has been written; one trim at a time runs per directory, whichever
  process starts it;
* directories emptied by a trim are removed; whoever puts a file into the
  cache creates its directory again if a trim removed it meanwhile
  (``relstorage.blobs.base.make_dir``, ``database.DatabaseBlobs.place``).

Run as ``python -m relstorage.blobs.cache DIRECTORY SIZE [KEEP_RECENT]``
it trims once (that is what the external check runs).
"""
import logging
import os
import subprocess
import sys
import threading
import time

from ZODB.blob import BLOB_SUFFIX

try:
    import fcntl
except ImportError:    # Windows: an open file cannot be removed anyway.
    fcntl = None

log = logging.getLogger(__name__)

#: The lock file that lets one trim at a time run on a directory.
TRIM_LOCK = '.trim.lock'
#: A temporary download or cache file older than this (seconds) was left
#: by a process that died; the trimmer removes it.
STALE_TEMPORARY = 3600.0
#: A use of a cached blob is recorded (its access time set) when the last
#: record is older than this many seconds: the trim's order needs no finer
#: grain, and a blob read over and over costs no utime (a warm open of a
#: 10 KiB blob went from 48-53 to 42-46 us with this and one stat less,
#: alternating runs on SQLite).
TOUCH_EVERY = 1.0
#: A cached blob used (placed, loaded or opened) in the last this many
#: seconds is not trimmed: the name loadBlob returned may not be opened yet.
RECENT_USE = 60.0


def _record_use(target, st):
    """Set the access time of ``target`` (a path or a file descriptor)
    whose stat is ``st``, unless it was set in the last TOUCH_EVERY
    seconds."""
    now = time.time()
    if st.st_atime < now - TOUCH_EVERY:
        try:
            os.utime(target, (now, st.st_mtime))
        except OSError:
            pass    # trimmed meanwhile, or not ours to change: usable


def touch(path):
    """Record a use of the cached blob ``path`` (its access time orders the
    trim and keeps it for RECENT_USE seconds); False if it is not cached.

    The use is recorded under a shared lock of the file: a trim deciding
    on the file holds the exclusive one, so either it sees this use and
    keeps the file, or it removed the file before, which is then found
    unlinked (False: the caller downloads it again).  An open, a flock and
    an fstat more than a stat; a warm loadBlob is still a few
    microseconds."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_SH)
        st = os.fstat(fd)
        if st.st_nlink == 0:
            return False        # trimmed while this waited for the lock
        _record_use(fd, st)
        return True
    finally:
        os.close(fd)


def hold(file):
    """Protect the open cached blob ``file`` from the trimmer for as long
    as it stays open, and record the use.  A trim that removed the file
    between its opening and the lock did no harm: the reader's descriptor
    still reads the whole blob (cache files are only ever complete, and a
    path always names the same revision's bytes), and the next reader
    downloads it again.  (Checking the path again cost a stat per open.)"""
    fd = file.fileno()
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_SH)
    _record_use(fd, os.fstat(fd))


def _remove_unless_open(path, used_before=None):
    """Remove the cached blob ``path`` unless a reader holds it or, with
    ``used_before`` (a time), it was used since then; True if it was
    removed (or was already gone)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False    # a reader holds it
        st = os.fstat(fd)
        if used_before is not None and st.st_atime >= used_before:
            return False        # used since the trim looked at it
        try:
            if os.stat(path).st_ino != st.st_ino:
                return False    # downloaded again meanwhile: a new file
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError:
            return False    # Windows: open elsewhere
        return True
    finally:
        os.close(fd)


def _remove_empty_dirs(path, top):
    """Remove ``path`` and its parents up to (not including) ``top`` while
    they are empty."""
    while len(path) > len(top):
        try:
            os.rmdir(path)
        except OSError:
            return
        path = os.path.dirname(path)


def trim(directory, target, keep_recent=RECENT_USE):
    """Remove cached blobs, least recently used first, until those left take
    at most ``target`` bytes; files open in a reader, and files used in the
    last ``keep_recent`` seconds (at least TOUCH_EVERY), are skipped.  Returns ``(bytes before,
    bytes after)``, or None when another trim holds the directory."""
    directory = os.path.abspath(directory)
    lock = open(os.path.join(directory, TRIM_LOCK), 'a')
    try:
        if fcntl is not None:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return None
        entries = []
        total = 0
        now = time.time()
        # A use is recorded at most every TOUCH_EVERY seconds: a file used
        # more recently than that may show an older time.
        used_before = now - max(keep_recent, TOUCH_EVERY)
        temporary = os.path.join(directory, 'tmp')
        for dirpath, dirnames, filenames in os.walk(directory):
            if dirpath == directory and 'tmp' in dirnames:
                dirnames.remove('tmp')      # uncommitted blobs: not cached
            for name in filenames:
                path = os.path.join(dirpath, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                if name.endswith(BLOB_SUFFIX):
                    total += st.st_size
                    if st.st_atime < used_before:
                        entries.append((st.st_atime, st.st_size, path))
                elif (name.endswith('.tmp') and dirpath != temporary
                      and now - st.st_mtime > STALE_TEMPORARY):
                    _remove_unless_open(path)
        before = total
        if total > target:
            entries.sort()
            for _, size, path in entries:
                if total <= target:
                    break
                if _remove_unless_open(path, used_before):
                    total -= size
                    _remove_empty_dirs(os.path.dirname(path), directory)
        if before != total:
            log.info('blob cache %s: trimmed from %d to %d bytes (target %d)',
                     directory, before, total, target)
        return before, total
    finally:
        lock.close()


class CacheSize:
    """Counts what this process writes into a cache directory and starts a
    trim each time the check amount has been written."""

    def __init__(self, directory, limit, check_percent, external=False):
        self.directory = directory
        self.limit = limit
        self.external = external
        self._check = (None if limit is None
                       else max(1, limit * check_percent // 100))
        self._written = 0
        self._lock = threading.Lock()
        self._thread = None
        if limit is not None:
            # The cache may have grown while this process was not running.
            self.start_trim()

    def written(self, size):
        """``size`` bytes were just added to the cache."""
        if self._check is None:
            return
        with self._lock:
            self._written += size
            due = self._written >= self._check
            if due:
                self._written = 0
        if due:
            self.start_trim()

    def start_trim(self):
        """Trim in the background, unless this process is trimming
        already."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._run, name=f'blob cache trim {self.directory}',
                daemon=True)
            self._thread.start()

    def _run(self):
        try:
            if self.external:
                subprocess.run(
                    [sys.executable, '-m', __name__, self.directory,
                     str(self.limit)], check=True, stdin=subprocess.DEVNULL)
            else:
                trim(self.directory, self.limit)
        except Exception:
            log.exception('trimming the blob cache %s failed', self.directory)

    def wait(self, timeout=None):
        """Wait for a trim in progress to end."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    keep_recent = RECENT_USE
    try:
        if len(argv) == 3:
            keep_recent = float(argv[2])
        if len(argv) not in (2, 3) or not argv[1].isdigit() or (
                not keep_recent >= 0):
            raise ValueError(argv)
    except ValueError:
        print('usage: python -m relstorage.blobs.cache DIRECTORY SIZE '
              '[KEEP_RECENT_SECONDS]', file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO)
    trim(argv[0], int(argv[1]), keep_recent)
    return 0


if __name__ == '__main__':
    sys.exit(main())
