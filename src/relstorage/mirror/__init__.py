"""The JSON mirror (``json-state``): a JSON rendering of each stored
state, written beside its pickle, for SQL queries and other languages.

The pickle stays the only source of truth: nothing reads the JSON back
into an object.  ``render`` turns a record into JSON by reading its
pickles as data (``relstorage.pickles``), importing and running nothing.

May import the base (``relstorage.pickles``, ``relstorage.errors``).
"""
