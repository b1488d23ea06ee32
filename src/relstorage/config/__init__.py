"""What a storage is told, and opening one from configuration text or a
URI.  Two layers live here:

- ``options`` (the typed options, one per ZConfig key; defaults read from
  ``component.xml``) and ``replicas`` (replica files and the choice of a
  server) are base modules: the adapters and the storage read them, and
  they import nothing of relstorage but ``errors``;
- ``zconfig`` (the factories behind ``%import relstorage``) and ``uri``
  (the zodburi resolvers) are entry points: they build adapters and
  storages, and nothing inside relstorage imports them but ``cli``.

This package's ``__init__`` imports nothing, so that reading an option
never loads the storage.  ``component.xml`` stays at the top of the
``relstorage`` package, where ``%import relstorage`` looks for it.
"""
