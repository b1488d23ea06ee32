"""What a storage has done: counters read with ``storage.metrics()`` and,
when prometheus_client is installed, exported to Prometheus.

Each storage instance (ZODB's per-connection MVCC instance and the root)
counts into a ``Counters`` of its own without a lock: one thread at a time
uses an instance, so an increment is one attribute update on the hot path
(a load, a store).  ``Metrics`` (one per root storage) adds up the live
instances' counters and those of instances already released when asked.

With prometheus_client importable, every open root storage is collected
by one collector in prometheus_client's default registry, labelled with
the storage's name: ``relstorage_loads_total{storage="..."}`` and so on
(``prometheus_client.start_http_server`` or the application's own
endpoint serves them).
"""
import threading
import time
import weakref

#: name -> help (Prometheus counters).  Seconds are sums of durations.
COUNTERS = {
    'loads': 'objects loaded (load, loadBefore)',
    'polls': 'snapshots started (poll_invalidations)',
    'invalidations': 'objects changed by others, seen at polls',
    'commits': 'transactions committed',
    'aborts': 'transactions aborted after tpc_begin',
    'commit_seconds': 'seconds from tpc_begin to the end of tpc_finish, '
                      'committed transactions',
    'lock_wait_seconds': 'seconds spent taking the locks of a commit at '
                         'vote',
    'conflicts': 'commits that failed with a ConflictError',
    'conflicts_resolved': 'conflicts resolved at vote',
    'objects_written': 'object states stored by commits',
    'bytes_written': 'bytes of object states stored',
    'read_ahead_rows': 'rows loaded ahead of being asked for (read-ahead)',
    'read_ahead_unused': 'rows read ahead that their transaction never '
                         'asked for',
    'json_unrendered': 'states committed with json-state that could not '
                       'be rendered as JSON (their mirror row is null)',
}


class Counters:
    """One instance's counts (see the module docstring)."""

    __slots__ = tuple(COUNTERS) + ('last_commit', '__weakref__')

    def __init__(self):
        for name in COUNTERS:
            setattr(self, name, 0)
        #: ``(ended, seconds)`` of the last commit (monotonic), or None:
        #: what the next commit records for a pack's watch
        #: (relstorage.storage.commit).
        self.last_commit = None

    def committed(self, txn):
        """Count the committed relstorage.storage.commit.PendingTransaction ``txn``."""
        now = time.monotonic()
        self.commits += 1
        self.commit_seconds += now - txn.started
        self.last_commit = (now, now - txn.started)
        self.lock_wait_seconds += txn.lock_wait
        self.conflicts_resolved += len(txn.resolved)
        self.objects_written += txn.stored()
        self.bytes_written += txn.written
        self.json_unrendered += txn.unrendered

    def add_to(self, totals):
        for name in COUNTERS:
            totals[name] += getattr(self, name)


class Metrics:
    """The counts of one root storage and its instances."""

    def __init__(self):
        self._lock = threading.Lock()
        self._live = weakref.WeakSet()
        self._released = dict.fromkeys(COUNTERS, 0)
        #: The running or last pack: phase, done, total, started (epoch).
        self.pack = None

    def counters(self):
        counters = Counters()
        with self._lock:
            self._live.add(counters)
        return counters

    def release(self, counters):
        """Keep what ``counters`` counted after its instance is gone."""
        with self._lock:
            if counters in self._live:
                self._live.discard(counters)
                counters.add_to(self._released)

    def totals(self):
        with self._lock:
            totals = dict(self._released)
            for counters in list(self._live):
                counters.add_to(totals)
        return totals


def snapshot(storage):
    """``storage.metrics()``: the counters, the shared cache's figures and
    the pack's progress, as one dict."""
    root = storage if storage._is_root else storage._root
    result = {'storage': root._name}
    result.update(root._metrics.totals())
    cache = root._cache.stats()
    result['cache_hits'] = cache.get('hits', 0)
    result['cache_misses'] = cache.get('misses', 0)
    result['cache_objects'] = cache.get('count', 0)
    result['cache_bytes'] = cache.get('size_bytes', 0)
    pool = root._pool.stats()
    result['max_connections'] = pool['max']
    result['connections_open'] = pool['open']
    result['connections_busy'] = pool['busy']
    result['connection_waits'] = pool['waits']
    result['connection_wait_seconds'] = pool['wait_seconds']
    result['connection_timeouts'] = pool['timeouts']
    result['pack'] = dict(root._metrics.pack) if root._metrics.pack else None
    return result


class PackProgress:
    """Wraps a pack's Progress to keep ``Metrics.pack`` current."""

    def __init__(self, progress, metrics):
        self._progress = progress
        self._metrics = metrics
        metrics.pack = {'phase': 'starting', 'done': 0, 'total': None,
                        'started': time.time(), 'running': True}

    def __getattr__(self, name):
        return getattr(self._progress, name)

    def phase(self, what, total=None, *args, **kwargs):
        self._metrics.pack.update(phase=what, done=0, total=total)
        return self._progress.phase(what, total, *args, **kwargs)

    def add(self, count, **tallies):
        self._metrics.pack['done'] += count
        return self._progress.add(count, **tallies)

    def finished(self, error=None):
        self._metrics.pack.update(
            running=False, ended=time.time(),
            phase='stopped' if error else 'done',
            error=None if error is None else str(error))


# -- Prometheus ---------------------------------------------------------------

_storages = weakref.WeakSet()
_registered = False
_register_lock = threading.Lock()


def export(storage):
    """Collect ``storage`` (a root) for Prometheus if prometheus_client is
    installed; a no-op otherwise."""
    global _registered
    try:
        import prometheus_client
    except ImportError:
        return False
    with _register_lock:
        _storages.add(storage)
        if not _registered:
            prometheus_client.REGISTRY.register(_Collector())
            _registered = True
    return True


class _Collector:
    """prometheus_client's custom collector over every open storage."""

    def collect(self):
        from prometheus_client.core import CounterMetricFamily
        from prometheus_client.core import GaugeMetricFamily
        storages = [s for s in list(_storages) if not s._closed]
        figures = [snapshot(s) for s in storages]
        for name, text in COUNTERS.items():
            family = CounterMetricFamily(
                f'relstorage_{name}', text, labels=['storage'])
            for values in figures:
                family.add_metric([values['storage']], values[name])
            yield family
        for name, text, cls in (
                ('cache_hits', 'loads answered by the shared cache',
                 CounterMetricFamily),
                ('cache_misses', 'loads the shared cache could not answer',
                 CounterMetricFamily),
                ('cache_objects', 'objects in the shared cache',
                 GaugeMetricFamily),
                ('cache_bytes', 'bytes in the shared cache',
                 GaugeMetricFamily),
                ('connections_open', 'database connections open for the '
                 'storage\'s instances and object-id reservations',
                 GaugeMetricFamily),
                ('connections_busy', 'of those, in use (not idle in the '
                 'pool of max-connections)', GaugeMetricFamily),
                ('connection_waits', 'times a caller waited at '
                 'max-connections', CounterMetricFamily),
                ('connection_wait_seconds', 'seconds callers waited at '
                 'max-connections', CounterMetricFamily),
                ('connection_timeouts', 'waits at max-connections that ran '
                 'out (MaxConnectionsError)', CounterMetricFamily)):
            family = cls(f'relstorage_{name}', text, labels=['storage'])
            for values in figures:
                family.add_metric([values['storage']], values[name])
            yield family
        done = GaugeMetricFamily(
            'relstorage_pack_done', 'items done in the running pack phase',
            labels=['storage', 'phase'])
        for values in figures:
            pack = values['pack']
            if pack and pack.get('running'):
                done.add_metric([values['storage'], pack['phase']],
                                pack['done'])
        yield done
