"""Packing: placeholder until the pack pipeline lands."""
from ZODB.POSException import Unsupported


def pack(storage, t, referencesf, gc=True):
    raise Unsupported('pack is not implemented yet')
