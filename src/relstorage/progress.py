"""How long work (pack, convert, verify) reports as it goes.

A ``Progress`` logs at INFO level, a line per phase and one every
``LOG_EVERY`` seconds within it; the console scripts' ``TerminalProgress``
(``relstorage.cli``) also keeps a live line on a terminal.  The work asks
``stop_requested`` at each point where it can stop cleanly.
"""
import logging
import time

#: Seconds between progress messages in the log.
LOG_EVERY = 10.0


def _size(nbytes):
    for unit in ('bytes', 'KB', 'MB', 'GB'):
        if nbytes < 1000 or unit == 'GB':
            break
        nbytes /= 1000
    return (f'{nbytes:,.0f} {unit}' if unit == 'bytes'
            else f'{nbytes:,.1f} {unit}')


class Progress:
    """Phases of work, each counting ``done`` of an optional ``total``
    (what rate and time left are computed from), with tallies of other
    things shown beside (``add(..., records=3, bytes=1200)``).  ``name``
    starts every message (``pack:``, ``convert:``)."""

    def __init__(self, name='pack', logger=None):
        self.name = name
        self.log = logger or logging.getLogger('relstorage.' + name)
        self.what = None
        self.total = None
        self.done = 0
        self.tallies = {}
        self.unit = ''
        self.started = None
        self._next_log = 0.0

    def phase(self, what, total=None, started=None, unit=''):
        """A new phase begins (or began at ``started``, a time.monotonic()
        value): ``what`` (plural noun phrase), ``total`` of them if
        known; ``unit`` names what ``done`` counts when it is not ``what``
        itself (``'bytes'``: shown as sizes)."""
        self.what, self.total, self.done = what, total, 0
        self.unit, self.tallies = unit, {}
        self.started = time.monotonic() if started is None else started
        self._next_log = self.started + LOG_EVERY
        of = f' ({self._amount(total)})' if total is not None else ''
        self.log.info('%s: %s%s', self.name, what, of)

    def add(self, count, **tallies):
        """``count`` more done; ``tallies`` are added to the named
        counters shown beside."""
        self.done += count
        for key, value in tallies.items():
            self.tallies[key] = self.tallies.get(key, 0) + value
        now = time.monotonic()
        if now >= self._next_log:
            self._next_log = now + LOG_EVERY
            self.log.info('%s: %s: %s', self.name, self.what,
                          self.describe(now))

    def _amount(self, value):
        if self.unit == 'bytes':
            return _size(value)
        return f'{value:,}' + (f' {self.unit}' if self.unit else '')

    def _tallies(self):
        return [_size(value) if key == 'bytes' else f'{value:,} {key}'
                for key, value in self.tallies.items()]

    def describe(self, now=None):
        """``done of total, tallies, rate/s, time left`` of the current
        phase (a position in bytes goes after the tallies)."""
        now = time.monotonic() if now is None else now
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        text = self._amount(self.done)
        if self.total:
            text += f' of {self._amount(self.total)}'
        if self.unit == 'bytes':
            parts = self._tallies() + [text]
        else:
            parts = [text] + self._tallies()
        parts.append(f'{self._amount(rate) if self.unit else f"{rate:,.0f}"}'
                     f'/s')
        if self.total and rate > 0 and self.done <= self.total:
            parts.append(f'{(self.total - self.done) / rate:,.0f}s left')
        return ', '.join(parts)

    def end_phase(self):
        if self.what is not None:
            self.log.info('%s: %s: %s in %.1fs', self.name, self.what,
                          self.summary(), time.monotonic() - self.started)
        self.what = None

    def summary(self):
        """What the phase did, for its last line (a position in bytes is
        left out when there are tallies)."""
        if self.unit == 'bytes' and self.tallies:
            return ', '.join(self._tallies())
        return ', '.join([self._amount(self.done)] + self._tallies())

    def note(self, message, *args):
        self.log.info(f'{self.name}: ' + message, *args)

    def warn(self, message, *args):
        """A note the user must see (logged as a warning)."""
        self.log.warning(f'{self.name}: ' + message, *args)

    def stop_requested(self):
        return False
