"""Choosing a database driver for the ``driver`` option (every adapter's
``select_driver`` is this, with its own list)."""
from relstorage.errors import ConfigurationError


def select_driver(name, drivers, database, hint):
    """The driver named ``name``, made by its factory in ``drivers`` (a
    dict of name to factory, in order of preference; a factory raises
    ImportError when its module is missing and names its PyPI package as
    ``package``).  ``auto`` takes the first that imports; ``hint`` says
    what to install when none does (for ``database``'s drivers).  Any
    other failure is a ConfigurationError that names the option."""
    if name == 'auto':
        errors = []
        for candidate, factory in drivers.items():
            try:
                return factory()
            except ImportError as e:
                errors.append(f'{candidate}: {e}')
        raise ConfigurationError(
            f'driver: auto found no {database} driver; {hint} '
            f'({"; ".join(errors)})')
    try:
        factory = drivers[name]
    except KeyError:
        raise ConfigurationError(
            f'driver: {name!r} is not one of auto, {", ".join(drivers)}'
        ) from None
    try:
        return factory()
    except ImportError as e:
        raise ConfigurationError(
            f'driver: {name!r} is not installed; install {factory.package} '
            f'({e})') from e
