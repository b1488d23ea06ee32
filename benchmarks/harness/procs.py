"""Running the benchmark's processes: a workload subprocess and the JSON
it returns, several of them at once, or a console script (zodbconvert,
zodbpack) timed with its peak memory.

Every process gets ``venvs.clean_env()`` (nothing that could put another
``relstorage`` on its path) and runs in ``benchmarks/``.  A failure is a
``WorkloadFailed`` whose message is the end of the process's error output.
"""
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import BENCH
from .venvs import clean_env

#: Lines of a failed process's output kept in its error message.
TAIL_LINES = 15


class WorkloadFailed(Exception):
    """A benchmark process failed: its message says how."""


#: The database servers' process names (their CPU: server_cpu_seconds).
SERVERS = ('mariadbd', 'mysqld', 'postgres')


def server_cpu_seconds():
    """CPU seconds used so far by the database servers' processes on this
    machine (Linux's /proc)."""
    tick = os.sysconf('SC_CLK_TCK')
    total = 0
    for entry in Path('/proc').iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / 'stat').read_text()
        except OSError:
            continue
        command = stat[stat.index('(') + 1:stat.rindex(')')]
        if command in SERVERS:
            fields = stat[stat.rindex(')') + 2:].split()
            total += int(fields[11]) + int(fields[12])
    return round(total / tick, 2)


def tail(text, lines=TAIL_LINES):
    return '\n'.join(text.strip().splitlines()[-lines:])


class Child:
    """One process, started at once; ``result()`` waits for it and returns
    the JSON document it wrote.

    By default ``--out FILE`` is appended to ``cmd`` and the document is
    read from that file; with ``stdout_json`` it is the last line the
    process printed.  With ``relay`` (a prefix) its error output is copied
    to ours line by line as it comes (long steps log their progress);
    otherwise it is kept for the error message.  With ``logfile`` the
    command and everything it printed are appended there."""

    def __init__(self, cmd, name=None, *, stdout_json=False, relay=None,
                 logfile=None):
        self.cmd = [str(c) for c in cmd]
        self.name = name or (self.cmd[3] if len(self.cmd) > 3
                             else self.cmd[-1])
        self.logfile = logfile
        self.tmp = Path(tempfile.mkdtemp(prefix='bench-'))
        self.out = None if stdout_json else self.tmp / 'out.json'
        if self.out:
            self.cmd += ['--out', str(self.out)]
        self.stdout = open(self.tmp / 'stdout', 'w+')
        self.stderr = None if relay else open(self.tmp / 'stderr', 'w+')
        self.lines = collections.deque(maxlen=TAIL_LINES)
        self._outcome = None
        self.proc = subprocess.Popen(
            self.cmd, stdout=self.stdout,
            stderr=subprocess.PIPE if relay else self.stderr, text=True,
            env=clean_env(), cwd=str(BENCH))
        self.relay = None
        if relay:
            self.relay = threading.Thread(
                target=self._relay, args=(relay,), daemon=True)
            self.relay.start()

    def _relay(self, prefix):
        for line in self.proc.stderr:
            line = line.rstrip()
            self.lines.append(line)
            print(f'      {prefix}| {line}', file=sys.stderr, flush=True)

    def poll(self):
        return self.proc.poll()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()

    def result(self, timeout):
        """The process's JSON; WorkloadFailed when it failed, printed none
        or ran longer than ``timeout`` seconds (then it is killed).  Asked
        again (a caller's cleanup after a failure), the same answer: the
        outputs are read once."""
        if self._outcome is not None:
            value, error = self._outcome
            if error is not None:
                raise error
            return value
        try:
            value = self._result(timeout)
        except WorkloadFailed as e:
            self._outcome = (None, e)
            raise
        self._outcome = (value, None)
        return value

    def _result(self, timeout):
        try:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise WorkloadFailed(f'{self.name} ran longer than '
                                     f'{timeout:g}s')
            finally:
                if self.relay:
                    self.relay.join()
            out, err = self._outputs()
            if self.proc.returncode != 0:
                raise WorkloadFailed(tail(err or out) or
                                     f'{self.name}: exit status '
                                     f'{self.proc.returncode}')
            try:
                if self.out:
                    return json.loads(self.out.read_text())
                return json.loads(out.strip().splitlines()[-1])
            except (OSError, ValueError, IndexError):
                raise WorkloadFailed(f'{self.name} returned no JSON: '
                                     f'{out[-500:]!r}')
        finally:
            self.close()

    def _outputs(self):
        self.stdout.seek(0)
        out = self.stdout.read()
        if self.stderr:
            self.stderr.seek(0)
            err = self.stderr.read()
        else:
            err = '\n'.join(self.lines)
        if self.logfile:
            with open(self.logfile, 'a') as f:
                f.write(f'$ {" ".join(self.cmd)}\n{err}{out}')
        return out, err

    def failure(self):
        """The error message of a process that failed (see run_all)."""
        out, err = self._outputs()
        return tail(err or out) or f'{self.name}: exit status ' \
            f'{self.proc.returncode}'

    def close(self):
        for f in (self.stdout, self.stderr):
            if f:
                f.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def run_json(cmd, timeout, **options):
    """Run ``cmd`` (see Child) to its end; its JSON document."""
    return Child(cmd, **options).result(timeout)


def run_all(children, timeout):
    """Wait for processes started together; their JSON documents, or
    WorkloadFailed with the error of the first that failed (the others
    are killed then, as all are after ``timeout`` seconds)."""
    failed = None
    deadline = time.monotonic() + timeout
    try:
        while any(c.poll() is None for c in children):
            for c in children:
                if c.poll() not in (None, 0) and failed is None:
                    failed = c
            if failed or time.monotonic() > deadline:
                for c in children:
                    c.kill()
            time.sleep(0.05)
        failed = failed or next((c for c in children if c.poll() != 0),
                                None)
        if failed:
            raise WorkloadFailed(failed.failure())
        return [c.result(timeout) for c in children]
    finally:
        for c in children:
            c.close()


def measured(cmd, logfile, timeout):
    """Run ``cmd`` with its output to ``logfile``; returns the wall seconds
    and the process's peak RSS in MiB (``os.wait4``).  WorkloadFailed with
    the end of the log when it fails (or is killed after ``timeout``)."""
    with open(logfile, 'w') as out:
        start = time.perf_counter()
        proc = subprocess.Popen([str(c) for c in cmd], stdout=out,
                                stderr=subprocess.STDOUT, env=clean_env(),
                                cwd=str(BENCH))
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        lines = Path(logfile).read_text().strip().splitlines()
        raise WorkloadFailed('\n'.join(lines[-TAIL_LINES:]) +
                             f'\n(exit status {proc.returncode}; the whole '
                             f'log: {logfile})')
    # ru_maxrss is in KiB on Linux.  It starts from this (small) harness's
    # own resident size at the fork, so it is never below that.
    return seconds, usage.ru_maxrss / 1024
