"""Child processes for tests: a script run by a separate interpreter
(``sys.executable``), talking JSON lines on stdout and words on stdin (see
tests/workers.py).  Every wait has a timeout and every child can be killed,
so that a storage bug fails a test instead of hanging the run."""
import json
import os
import queue
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

#: Seconds a whole child run may take before the test fails.
RUN_TIMEOUT = 60

#: Events that only say how far a child got (``hold``: ``voting`` before
#: tpc_vote, ``finishing`` before tpc_finish, ``committing`` before the
#: COMMIT): ``expect`` passes over them when it waits for another.
PROGRESS = frozenset({'voting', 'finishing', 'committing'})


class Worker:
    """One child process running a script of tests/ (``script``)."""

    def __init__(self, label, args, log_dir, script='workers.py'):
        self.label = label
        self.stderr_path = os.path.join(log_dir, f'{label}.stderr')
        self._stderr = open(self.stderr_path, 'wb')
        try:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.join(HERE, script),
                 *[str(a) for a in args]],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._stderr, text=True, encoding='utf-8', bufsize=1)
        except BaseException:
            self._stderr.close()
            raise
        self._lines = queue.Queue()
        self.output = []
        self._reader = threading.Thread(
            target=self._read, name=f'read-{label}', daemon=True)
        self._reader.start()

    def _read(self):
        try:
            for line in self.proc.stdout:
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        finally:
            self._lines.put(None)

    def stderr(self):
        self._stderr.flush()
        with open(self.stderr_path, encoding='utf-8', errors='replace') as f:
            return f.read()

    def _fail(self, why):
        self.kill()
        pytest.fail(f'worker {self.label}: {why}\n'
                    f'stdout: {"".join(self.output)}\n'
                    f'stderr:\n{self.stderr()}')

    def expect(self, event, timeout=RUN_TIMEOUT):
        """Wait for the next JSON line with ``event`` and return it; fail
        the test on an exit, another event or the timeout."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._lines.get(
                    timeout=remaining) if remaining > 0 else None
            except queue.Empty:
                line = None
                remaining = 0
            if line is None:
                if remaining <= 0:
                    self._fail(f'no {event!r} within {timeout}s')
                self._fail(f'exited (status {self.proc.wait(10)}) before '
                           f'{event!r}')
            self.output.append(line)
            try:
                message = json.loads(line)
            except ValueError:
                continue          # stray output; kept for the report
            if message.get('event') in PROGRESS and (
                    message['event'] != event):
                continue
            if message.get('event') != event:
                self._fail(f'expected {event!r}, got {message!r}')
            return message

    def next_event(self, timeout=RUN_TIMEOUT):
        """The next JSON line, whatever its event; None once the child's
        output has ended.  Fails the test on the timeout."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail(f'no output within {timeout}s')
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                self._lines.put(None)     # later calls see the end too
                return None
            self.output.append(line)
            try:
                return json.loads(line)
            except ValueError:
                continue

    def rest(self, timeout=RUN_TIMEOUT):
        """Every JSON line still to come, until the child's output ends
        (after it exited or was killed)."""
        events = []
        while True:
            message = self.next_event(timeout)
            if message is None:
                return events
            events.append(message)

    def send(self, word):
        self.proc.stdin.write(word + '\n')
        self.proc.stdin.flush()

    def wait(self, timeout=RUN_TIMEOUT):
        """Wait for a clean exit."""
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._fail(f'still running after {timeout}s')
        if status != 0:
            self._fail(f'exit status {status}')

    def kill(self):
        """SIGKILL (TerminateProcess on Windows) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)

    def close(self):
        try:
            self.kill()
        finally:
            self._reader.join(10)
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except (OSError, ValueError):
                    pass
            self._stderr.close()


def run_on_terminal(command, timeout):
    """Run ``command`` with a pseudo-terminal as its stdout and stderr (as
    on an administrator's screen); ``(exit status, what it wrote)``."""
    import pty
    import select
    main, child = pty.openpty()
    proc = subprocess.Popen(command, stdout=child, stderr=child,
                            close_fds=True)
    os.close(child)
    output = b''
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout)
    os.close(main)
    return proc.returncode, output.decode('utf-8', 'replace')
