"""Database servers listed in a replica file (``replica-conf``,
``ro-replica-conf``), with the choice of which one to use.

The file names one server per line, in order of preference: ``host``,
``host:port`` or ``[ipv6-address]:port``; blank lines and lines starting
with ``#`` are ignored (the format of RelStorage 4's replica files).  A
connection goes to the server in use, else to the next one that answers,
in order, coming round to the first; the list remembers the one that
answered.  Off the first server, the list goes back to trying the first
one ``replica-timeout`` seconds later (0: never).  An edited file takes
effect at the next connection; connections already open are replaced
between transactions (``ReplicaList.stale``).

The state kept here is which server this process prefers, nothing the
database has to agree on: the lock only keeps the threads of one process
from reading it half-updated.
"""
import os
import threading
import time

from relstorage.errors import ConfigurationError

#: Seconds between two looks at the file's modification time.
RECHECK = 1.0


def parse_server(line):
    """``(host, port)`` of one line of a replica file; port None where the
    line gives none.  Raises ValueError for a line that is not a server."""
    text = line.strip()
    if text.startswith('['):
        host, sep, rest = text[1:].partition(']')
        if not sep or not host or (rest and not rest.startswith(':')):
            raise ValueError(f'{line!r} is not a server ([address]:port)')
        port = rest[1:] or None
    elif text.count(':') == 1:
        host, port = text.split(':')
    else:
        # A host name, an IPv4 address, a socket directory, or a bare IPv6
        # address (more than one colon: no port).
        host, port = text, None
    if not host or any(c.isspace() for c in host):
        raise ValueError(f'{line!r} is not a server (host or host:port)')
    if port is not None:
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f'{line!r}: the port is not a number from 1 '
                             f'to 65535')
        port = int(port)
    return host, port


def read_servers(option, path):
    """The servers of the replica file at ``path``, in order.  Raises
    ConfigurationError naming ``option`` when the file cannot be read,
    names no server or has a line that is not one."""
    try:
        with open(path, encoding='utf-8') as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeError) as e:
        raise ConfigurationError(
            f'{option}: cannot read {path!r}: {e}') from None
    servers = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith('#'):
            continue
        try:
            servers.append(parse_server(line))
        except ValueError as e:
            raise ConfigurationError(
                f'{option}: {path}, line {number}: {e}') from None
    if not servers:
        raise ConfigurationError(f'{option}: {path!r} names no server')
    return servers


def server_text(server):
    host, port = server
    if port is None:
        return host
    return f'[{host}]:{port}' if ':' in host else f'{host}:{port}'


class ReplicaList:
    """The servers of one replica file and the one in use."""

    def __init__(self, option, path, timeout, clock=time.monotonic):
        self.option = option
        self.path = path
        self.timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._servers = read_servers(option, path)
        self._stamp = self._file_stamp()
        self._checked = clock()
        self._current = 0
        self._left_first = None   # when the list moved off the first

    def __repr__(self):
        return (f'<ReplicaList {self.option}={self.path!r}: '
                f'{", ".join(map(server_text, self.servers()))}>')

    def _file_stamp(self):
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _refresh(self):
        """Re-read the file if it changed (at most every RECHECK
        seconds).  A file that became unreadable or empty keeps the
        servers read last (the error would come at every transaction)."""
        now = self._clock()
        if now - self._checked < RECHECK:
            return
        self._checked = now
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            servers = read_servers(self.option, self.path)
        except ConfigurationError:
            return
        if servers != self._servers:
            # The new first server is preferred again.
            self._servers = servers
            self._current = 0
            self._left_first = None

    def servers(self):
        with self._lock:
            return list(self._servers)

    def _preferred_index(self):
        if (self._current and self.timeout
                and self._clock() - self._left_first >= self.timeout):
            # Time to try the first server again.
            self._current = 0
            self._left_first = None
        return self._current

    def candidates(self):
        """The servers to try for a new connection, in order: the one in
        use, the ones after it, then the ones before."""
        with self._lock:
            self._refresh()
            start = self._preferred_index()
            return self._servers[start:] + self._servers[:start]

    def answered(self, server):
        """Record that ``server`` took a connection: it is the one in use
        from now on."""
        with self._lock:
            if server not in self._servers:
                return          # the file changed meanwhile
            index = self._servers.index(server)
            if index != self._current or (index and
                                          self._left_first is None):
                self._current = index
                self._left_first = self._clock() if index else None

    def stale(self, server):
        """Whether a connection open to ``server`` should be replaced
        between transactions: the file changed so that another server comes
        first, or replica-timeout ran out off the first server."""
        with self._lock:
            self._refresh()
            start = self._preferred_index()
            return self._servers[start] != server


def replica_lists(options):
    """``(read_write, read_only)`` ReplicaLists of the storage options
    (None where not configured).  Load connections use the read-only list,
    else the read-write one; every other connection the read-write list,
    else the adapter's own server."""
    rw = ro = None
    if options.replica_conf:
        rw = ReplicaList('replica-conf', options.replica_conf,
                         options.replica_timeout)
    if options.ro_replica_conf:
        ro = ReplicaList('ro-replica-conf', options.ro_replica_conf,
                         options.replica_timeout)
    return rw, ro
