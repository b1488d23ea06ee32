"""Shared default of an adapter: binding to the storage's options once."""
from relstorage.errors import ConfigurationError


class Adapter:
    """Subclasses build their roles in ``_configure`` (see
    interfaces.IAdapter.configure)."""

    options = None

    def configure(self, options):
        if self.options is not None:
            if self.options != options:
                raise ConfigurationError(
                    'this adapter is already used with other options: '
                    f'{self.options!r}')
            return
        self._configure(options)
        self.options = options
        self.keep_history = options.keep_history

    def _configure(self, options):
        raise NotImplementedError
