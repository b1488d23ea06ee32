"""Shared default of an adapter: binding to the storage's options once."""
from relstorage.errors import ConfigurationError


class Adapter:
    """Subclasses build their roles in ``_configure`` (see
    interfaces.IAdapter.configure)."""

    options = None
    #: The JSON mirror's role (interfaces.IMirror), or None where the
    #: database has none (json-state is then refused at start-up).
    mirror = None

    def configure(self, options):
        if self.options is not None:
            if self.options != options:
                raise ConfigurationError(
                    'this adapter is already used with other options: '
                    f'{self.options!r}')
            return
        self._configure(options)
        if options.json_state and not self.capabilities.json_mirror:
            raise ConfigurationError(
                f'json-state: the JSON mirror is not available on '
                f'{type(self).__name__} (PostgreSQL, MySQL, MariaDB and '
                f'SQLite have it)')
        self.options = options
        self.keep_history = options.keep_history

    def _configure(self, options):
        raise NotImplementedError
