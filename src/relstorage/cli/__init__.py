"""What relstorage's console scripts share: loading storages from a ZConfig
file, logging, progress on a terminal, and exit statuses.

The scripts stay thin: they parse their arguments, open storages with
``open_storages`` and call the library.  Bad input (a file that cannot be
read, a section that is not a storage, a bad argument) ends with one line
on standard error and exit status 2 (``BadInput``), as argparse does.

An entry point: may import every part of relstorage; nothing imports it.
"""
import argparse
import contextlib
import io
import logging
import signal
import sys
import time

import ZConfig

from relstorage.progress import Progress

#: Exit statuses.
OK, FAILED, BAD_INPUT, STOPPED = 0, 1, 2, 130

_SCHEMA = """
<schema>
  <import package="ZODB"/>
  <import package="relstorage"/>
  <multisection type="ZODB.storage" attribute="storages" name="*"/>
</schema>
"""


class BadInput(Exception):
    """The user's input cannot be used; the message says why."""


def command_parser(program, description, config_help, quiet=True,
                   debug=False):
    """The opening every console script's arguments share: its name and
    description, ``-q``/``--quiet`` where it logs (with ``debug``,
    ``--debug`` as the other choice) and the ``config`` argument (a
    ZConfig file, ``config_help`` saying which sections it holds)."""
    p = argparse.ArgumentParser(prog=program, description=description)
    level = p.add_mutually_exclusive_group() if debug else p
    if quiet:
        level.add_argument('-q', '--quiet', action='store_true',
                           help='log warnings and errors only')
    if debug:
        level.add_argument('--debug', action='store_true',
                           help='log at DEBUG level')
    p.add_argument('config', metavar='CONFIG', help=(
        f'a ZConfig file with {config_help}'))
    return p


def _read(path):
    try:
        with open(path, encoding='utf-8') as f:
            return f.read()
    except OSError as e:
        raise BadInput(f'cannot read {path}: {e.strerror}') from None
    except UnicodeDecodeError as e:
        raise BadInput(f'{path} is not a text file: {e}') from None


def _load(path, schema_text):
    text = _read(path)
    schema = ZConfig.loadSchemaFile(io.StringIO(schema_text))
    try:
        config, _ = ZConfig.loadConfigFile(schema, io.StringIO(text), path)
    except ZConfig.ConfigurationError as e:
        raise BadInput(f'{path}: {_one_line(e)}') from None
    return config


def load_storage_configs(path):
    """The storage sections of the ZConfig file ``path``: a list of
    section values, each with ``open()``.  Raises BadInput."""
    config = _load(path, _SCHEMA)
    if not config.storages:
        raise BadInput(f'{path} has no storage section (such as '
                       f'<relstorage> or <filestorage>)')
    return config.storages


def load_or_report(program, path):
    """``load_storage_configs(path)``, or None after saying on standard
    error why it cannot be used (the caller exits with BAD_INPUT)."""
    try:
        return load_storage_configs(path)
    except BadInput as e:
        print(f'{program}: error: {e}', file=sys.stderr)
        return None


def relstorage_adapter(config):
    """The adapter of a ``<relstorage>`` section value, configured with
    the section's options, or None for another kind of storage.  No
    storage is opened (a storage refuses a schema it does not know)."""
    from relstorage.config.zconfig import RelStorageFactory
    from relstorage.config.options import Options
    if not isinstance(config, RelStorageFactory):
        return None
    adapter = config.config.adapter.create()
    adapter.configure(Options.from_section(config.config))
    return adapter


def each_adapter(configs, log, ask, failure):
    """``ask(adapter)`` for the adapter of each ``<relstorage>`` section of
    ``configs`` (other sections are passed over, with a warning); returns
    the exit status (FAILED when ``ask`` raised for any, logged as
    ``NAME: FAILURE: why``) and ``[(name, answer)]``."""
    status, found = OK, []
    for config in configs:
        name = storage_name(config)
        try:
            adapter = relstorage_adapter(config)
            if adapter is None:
                log.warning('%s is not a relstorage: passed over', name)
                continue
            found.append((name, ask(adapter)))
        except Exception as e:
            log.error('%s: %s: %s', name, failure,
                      ' '.join(str(e).split()) or type(e).__name__)
            status = FAILED
    return status, found


def load_named_storages(path, names):
    """The storage sections named ``names`` (``<filestorage source>``)
    of the ZConfig file ``path``, in that order; each must be there once.
    Raises BadInput."""
    sections = '\n'.join(
        f'  <section type="ZODB.storage" name="{name}" attribute="{name}"'
        f' required="yes"/>' for name in names)
    schema = ('<schema>\n  <import package="ZODB"/>\n'
              '  <import package="relstorage"/>\n' + sections +
              '\n</schema>\n')
    config = _load(path, schema)
    return [getattr(config, name) for name in names]


def _one_line(error):
    return ' '.join(str(error).split())


def storage_name(config):
    """How messages name a storage section: ``name (type)``."""
    section = getattr(config, 'config', None)
    kind = section.getSectionType() if hasattr(
        section, 'getSectionType') else type(config).__name__
    return f'{getattr(config, "name", None) or "storage"} ({kind})'


def find_relstorage(storage):
    """The RelStorage under ``storage`` (which may wrap it, as
    zc.zlibstorage does, in ``base``), or None."""
    from relstorage.storage import RelStorage
    seen = 0
    while storage is not None and seen < 10:
        if isinstance(storage, RelStorage):
            return storage
        storage = getattr(storage, 'base', None)
        seen += 1
    return None


def setup_logging(program, quiet=False):
    """INFO (WARNING with ``quiet``) to standard error, with time stamps."""
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format='%(asctime)s [%(name)s] %(levelname)s %(message)s',
        stream=sys.stderr)
    return logging.getLogger(program)


class TerminalProgress(Progress):
    """Progress that also keeps one live line on a terminal (counts, rate,
    time left), and that can be asked to stop (``request_stop``)."""

    #: Seconds between redraws of the live line.
    REDRAW = 0.2

    def __init__(self, stream=None, name='pack'):
        super().__init__(name)
        self.stream = stream or sys.stderr
        self.live = bool(getattr(self.stream, 'isatty', lambda: False)())
        self._stop = False
        self._drawn = 0.0

    def request_stop(self):
        self._stop = True

    def stop_requested(self):
        return self._stop

    def _clear(self):
        if self.live:
            self.stream.write('\r\x1b[K')
            self.stream.flush()

    def phase(self, what, total=None, started=None, unit=''):
        self._clear()
        super().phase(what, total, started, unit)
        self._drawn = 0.0       # draw at the phase's first count

    def add(self, count, **tallies):
        if not self.live:
            return super().add(count, **tallies)
        self.done += count
        for key, value in tallies.items():
            self.tallies[key] = self.tallies.get(key, 0) + value
        now = time.monotonic()
        if now - self._drawn >= self.REDRAW:
            self._drawn = now
            self.stream.write(f'\r\x1b[K  {self.what}: {self.describe(now)}')
            self.stream.flush()

    def end_phase(self):
        self._clear()
        super().end_phase()

    def note(self, message, *args):
        self._clear()
        super().note(message, *args)


@contextlib.contextmanager
def stop_on_ctrl_c(progress, program, boundary):
    """While the block runs, the first Ctrl-C asks ``progress`` to stop at
    the next ``boundary`` (``'batch boundary'``) and says so; a second one
    interrupts at once."""
    previous = signal.getsignal(signal.SIGINT)

    def on_interrupt(signum, frame):
        progress.request_stop()
        signal.signal(signal.SIGINT, previous)
        print(f'\n{program}: stopping at the next {boundary} (Ctrl-C again '
              f'to abort at once)', file=sys.stderr)
    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
