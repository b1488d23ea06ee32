"""blob_floor.py's measuring: the blob sizes and their labels, a source
file per size, timing a write, read or file operation over every size
(``Runner``), the peak growth of the resident set size during one
(``PeakRss``), and the table of medians it fills (``Table``).
"""
import ctypes
import ctypes.util
import filecmp
import itertools
import math
import os
import threading
import time

from harness.figures import median
from harness.report import log, render

KiB = 1024
MiB = 1024 * KiB


def parse_size(text):
    """'10K' -> 10240, '1M' -> 1048576, '1.5G', '4096' (suffixes are binary)."""
    text = text.strip().upper()
    for suffix in ('IB', 'B'):
        if text.endswith(suffix) and len(text) > len(suffix):
            text = text[:-len(suffix)]
            break
    factor = {'K': KiB, 'M': MiB, 'G': 1024 * MiB}.get(text[-1:], 1)
    if factor != 1:
        text = text[:-1]
    return int(float(text) * factor)


def size_label(nbytes):
    for unit, factor in (('G', 1024 * MiB), ('M', MiB), ('K', KiB)):
        if nbytes >= factor and nbytes % factor == 0:
            return '%d%s' % (nbytes // factor, unit)
    return str(nbytes)


def file_chunks(f, chunk_size):
    """Yield the contents of the open binary file f in pieces of chunk_size."""
    while True:
        data = f.read(chunk_size)
        if not data:
            return
        yield data


def chunk_count(size, chunk_size):
    return max(1, math.ceil(size / chunk_size))


# -- memory: peak resident set size growth during one operation -------------

_PAGE = os.sysconf('SC_PAGE_SIZE')
_libc_name = ctypes.util.find_library('c')
_libc = ctypes.CDLL(_libc_name) if _libc_name else None
_malloc_trim = getattr(_libc, 'malloc_trim', None)


def _rss(fd):
    # /proc/self/statm: size resident shared text lib data dt (in pages)
    return int(os.pread(fd, 128, 0).split()[1]) * _PAGE


class PeakRss:
    """Context manager: ``growth`` is the peak RSS during the block minus
    the RSS at its start, sampled by a background thread."""

    interval = 0.002

    def __enter__(self):
        if _malloc_trim is not None:
            _malloc_trim(0)  # give freed heap back, so growth is visible
        self._fd = os.open('/proc/self/statm', os.O_RDONLY)
        self.start = self.peak = _rss(self._fd)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, _rss(self._fd))

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss(self._fd))
        os.close(self._fd)
        self.growth = self.peak - self.start


class Table:
    """The medians of every measurement: one row per method (database,
    driver, layout, operation, method, chunk), per size its throughput
    (MiB/s) and the largest growth of the RSS (MiB)."""

    def __init__(self, sizes):
        self.sizes = sizes
        self.rows = {}  # key -> {size: (median MiB/s, max RSS growth)}

    def add(self, key, size, rate, growth):
        self.rows.setdefault(key, {})[size] = (rate, growth)

    def render(self):
        header = ['db', 'driver', 'layout', 'op', 'method', 'chunk']
        for size in self.sizes:
            header += [size_label(size) + ' MiB/s', 'dRSS MiB']
        rows = []
        for key, cells in self.rows.items():
            row = list(key)
            for size in self.sizes:
                if size in cells:
                    rate, growth = cells[size]
                    row.append('%.0f' % rate if rate >= 100
                               else '%.1f' % rate)
                    row.append('%.1f' % (growth / MiB))
                else:
                    row += ['-', '-']
            rows.append(tuple(row))
        return '\n'.join(render(tuple(header), rows, right_from=6))


class Runner:
    """Times write and read functions over all sizes and fills the table.

    A write function is ``fn(blob_id, src_file, chunk_size) -> ref``; it must
    COMMIT.  A read function is ``fn(ref, out_file, size, chunk_size)``.
    ``ref`` is whatever identifies the stored blob (blob_id or an oid).
    """

    def __init__(self, args, workdir):
        self.sizes = args.sizes
        self.repeat = args.repeat
        self.workdir = workdir
        self.table = Table(args.sizes)
        self._ids = itertools.count(1)
        self._sources = {}
        self._outputs = itertools.count()
        # Called (untimed) before the runs of each write measurement.
        self.before_write = None

    def source(self, size):
        """Path of a file of `size` random bytes (made once per size)."""
        if size not in self._sources:
            path = os.path.join(self.workdir, 'source-%d' % size)
            with open(path, 'wb') as f:
                left = size
                while left:
                    n = min(left, MiB)
                    f.write(os.urandom(n))
                    left -= n
            self._sources[size] = path
        return self._sources[size]

    def new_blob_id(self):
        return next(self._ids)

    def out_path(self):
        return os.path.join(self.workdir, 'out-%d' % next(self._outputs))

    def _record(self, key, size, times, growths):
        rate = size / MiB / median(times)
        self.table.add(key, size, rate, max(growths))
        log('  %-60s %6s %9.1f MiB/s  dRSS %6.1f MiB' % (
            ' / '.join(key), size_label(size), rate, max(growths) / MiB))

    def write(self, key, fn, chunk_size, verify, sizes=None):
        """Measure a write method; returns {size: ref of the last blob}."""
        refs = {}
        for size in sizes or self.sizes:
            src = self.source(size)
            if self.before_write:
                self.before_write()
            times, growths = [], []
            for _ in range(self.repeat):
                blob_id = self.new_blob_id()
                with PeakRss() as rss, open(src, 'rb') as f:
                    start = time.perf_counter()
                    ref = fn(blob_id, f, chunk_size)
                    times.append(time.perf_counter() - start)
                growths.append(rss.growth)
            self._record(key, size, times, growths)
            # Untimed check: the last blob, read back, equals its source.
            out = self.out_path()
            with open(out, 'wb') as f:
                verify(ref, f, size, chunk_size)
            self._check(out, src, key, 'written')
            refs[size] = ref
        return refs

    def read(self, key, fn, chunk_size, refs):
        """Measure a read method on the blobs in refs ({size: ref}).  One
        untimed run first checks the result and warms the server's cache,
        so every read method starts from the same cache state."""
        for size in self.sizes:
            if size not in refs:
                continue
            out = self.out_path()
            with open(out, 'wb') as f:
                fn(refs[size], f, size, chunk_size)
            self._check(out, self.source(size), key, 'read')
            times, growths = [], []
            for _ in range(self.repeat):
                out = self.out_path()
                with PeakRss() as rss:
                    start = time.perf_counter()
                    with open(out, 'wb') as f:
                        fn(refs[size], f, size, chunk_size)
                    times.append(time.perf_counter() - start)
                growths.append(rss.growth)
                os.unlink(out)
            self._record(key, size, times, growths)

    def timed(self, key, fn, prepare=None):
        """Measure a plain file operation fn(size, src_path) over all sizes;
        prepare(size, src_path), if given, runs untimed before each run."""
        for size in self.sizes:
            src = self.source(size)
            times, growths = [], []
            for _ in range(self.repeat):
                if prepare:
                    prepare(size, src)
                with PeakRss() as rss:
                    start = time.perf_counter()
                    fn(size, src)
                    times.append(time.perf_counter() - start)
                growths.append(rss.growth)
            self._record(key, size, times, growths)

    @staticmethod
    def _check(out, src, key, what):
        same = filecmp.cmp(out, src, shallow=False)
        os.unlink(out)
        if not same:
            raise AssertionError('%s: blob %s differs from its source'
                                 % (' / '.join(key), what))

