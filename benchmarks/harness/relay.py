"""A loopback TCP relay between a client and a database server that counts
round trips and can add latency, for what a real network costs.

This machine's kernel has no netem, so the relay stands in for the network:
the client connects to the relay's port instead of the server's, and the
relay copies bytes both ways.  It counts, for all its connections:

- **round trips**: a client send that follows a server reply (or that opens
  the conversation): each is a wait the client would pay on a network;
- **messages** each way (one read of the socket, however many protocol
  messages it holds) and **bytes** each way.

With ``rtt`` (milliseconds), every chunk is held back half of it in each
direction before it is passed on, in order, so a round trip costs ``rtt``
more.  Threads, not an event loop: asyncio's timers wake in whole
milliseconds (epoll), which would turn a 0.2 ms delay into 1 ms, where
``time.sleep`` keeps to tens of microseconds.  A test puts a relay in
front of a server and reads the counts before and after an operation
(``snapshot``).  A benchmark runs the relay as a process of its own
(``python benchmarks/relay.py --control-port 0``; its threads would
otherwise compete with the workload for the GIL) and reads the counts
through ``Control``, a second port that answers each connection with one
line of JSON.
"""
import collections
import json
import socket
import threading
import time

#: Bytes read from a socket at once.
CHUNK = 1 << 16


class Counts:
    """What crossed the relay: round trips, messages and bytes each way,
    connections opened.  ``a - b`` gives what happened in between."""

    FIELDS = ('round_trips', 'client_messages', 'server_messages',
              'client_bytes', 'server_bytes', 'connections')

    def __init__(self, **values):
        for name in self.FIELDS:
            setattr(self, name, values.get(name, 0))

    def __sub__(self, other):
        return Counts(**{name: getattr(self, name) - getattr(other, name)
                         for name in self.FIELDS})

    def as_dict(self):
        return {name: getattr(self, name) for name in self.FIELDS}

    def __repr__(self):
        return 'Counts(%s)' % ', '.join(
            f'{name}={getattr(self, name)}' for name in self.FIELDS)


class Relay:
    """Relays ``127.0.0.1:port`` (0: a free port, see ``port`` once
    started) to ``target`` (host, port), adding ``rtt`` milliseconds to
    every round trip.  With ``trace``, the first bytes of every client
    message that starts a round trip go to ``self.trace`` (what the client
    waited for: read it to see which statements cost a round trip)."""

    #: Bytes of a client message kept by ``trace``.
    TRACE_BYTES = 160

    def __init__(self, target, rtt=0.0, port=0, trace=False):
        self.target = target
        self.trace = [] if trace else None
        self.delay = rtt / 2000.0       # seconds, each way
        self.port = port
        self._counts = Counts()
        self._lock = threading.Lock()
        self._listener = None
        self._sockets = set()
        self._threads = []
        self._stopping = False
        # Cleared by ``freeze``: bytes are received but not passed on.
        self._flowing = threading.Event()
        self._flowing.set()

    def freeze(self):
        """Pass nothing on, either way, until ``thaw``: to the clients the
        server has stopped answering (a hung host, a network partition),
        and a new connection gets no greeting."""
        self._flowing.clear()

    def thaw(self):
        self._flowing.set()

    def start(self):
        self._listener = listener = _listen(self.port, 64)
        self.port = listener.getsockname()[1]
        self._spawn(self._accept)
        return self

    def stop(self):
        self._stopping = True
        self._flowing.set()
        with self._lock:
            sockets = [self._listener] + list(self._sockets)
            threads = list(self._threads)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in threads:
            thread.join(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()

    def snapshot(self):
        """The counts so far (a copy)."""
        with self._lock:
            return Counts(**self._counts.as_dict())

    def _spawn(self, target, *args):
        thread = threading.Thread(target=target, args=args, daemon=True,
                                  name='relay')
        with self._lock:
            # The threads of closed connections are let go: a benchmark's
            # relay sees thousands of connections.
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _accept(self):
        while not self._stopping:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets.update((client, server))
                self._counts.connections += 1
            link = _Link(self, client, server)
            self._spawn(self._pipe, client, server, 'client', link)
            self._spawn(self._pipe, server, client, 'server', link)

    def _forget(self, *sockets):
        """Close the sockets of a connection both ends have finished."""
        with self._lock:
            self._sockets.difference_update(sockets)
        for sock in sockets:
            sock.close()

    def _pipe(self, source, sink, side, link):
        """Copy ``side``'s bytes to the other end; with a delay, through a
        queue that a second thread empties in order, each chunk when due."""
        last = link.last
        queue = collections.deque()
        ready = threading.Condition()
        if self.delay:
            self._spawn(self._deliver, sink, queue, ready, link)
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    break
                self._flowing.wait()
                with self._lock:
                    counts = self._counts
                    if side == 'client':
                        counts.client_messages += 1
                        counts.client_bytes += len(data)
                        if last[0] == 'server':
                            counts.round_trips += 1
                            if self.trace is not None:
                                self.trace.append(data[:self.TRACE_BYTES])
                    else:
                        counts.server_messages += 1
                        counts.server_bytes += len(data)
                    last[0] = side
                if not self.delay:
                    sink.sendall(data)
                    continue
                with ready:
                    queue.append((time.monotonic() + self.delay, data))
                    ready.notify()
        except OSError:
            pass
        finally:
            if self.delay:
                with ready:
                    queue.append((0.0, None))
                    ready.notify()
            else:
                _close_writing(sink)
                link.done()

    @staticmethod
    def _deliver(sink, queue, ready, link):
        try:
            while True:
                with ready:
                    while not queue:
                        ready.wait()
                    due, data = queue.popleft()
                if data is None:
                    break
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                sink.sendall(data)
        except OSError:
            pass
        _close_writing(sink)
        link.done()


class _Link:
    """One client connection and its server connection: who spoke last
    (a client send after a server reply, or first, starts a round trip),
    and how many directions are still open; the sockets are closed when
    both are done."""

    def __init__(self, relay, client, server):
        self.relay = relay
        self.sockets = (client, server)
        self.last = ['server']
        self._open = 2
        self._lock = threading.Lock()

    def done(self):
        with self._lock:
            self._open -= 1
            finished = self._open == 0
        if finished:
            self.relay._forget(*self.sockets)


def _listen(port, backlog):
    """A socket listening on ``127.0.0.1:port`` (0: a free port)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(('127.0.0.1', port))
    listener.listen(backlog)
    return listener


def _close_writing(sock):
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Control:
    """The control channel of a relay: a listener on ``127.0.0.1:port``
    (0: a free one, see ``port`` once started) that answers every
    connection with the relay's counts so far, one line of JSON
    (``Counts.as_dict()``), and closes it.  A workload process reads it at
    the start and the end of each phase (benchmarks/roundtrips.py)."""

    def __init__(self, relay, port=0):
        self.relay = relay
        self.port = port
        self._listener = None
        self._thread = None

    def start(self):
        self._listener = listener = _listen(self.port, 16)
        self.port = listener.getsockname()[1]
        self._thread = threading.Thread(target=self._answer, daemon=True,
                                        name='relay control')
        self._thread.start()
        return self

    def stop(self):
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._thread.join(10)

    def _answer(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            line = json.dumps(self.relay.snapshot().as_dict()) + '\n'
            try:
                conn.sendall(line.encode('ascii'))
            except OSError:
                pass
            finally:
                conn.close()
