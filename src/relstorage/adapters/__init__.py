"""Database adapters: the shared role defaults live in this package, one
subpackage per database fills them in (see interfaces.py)."""
