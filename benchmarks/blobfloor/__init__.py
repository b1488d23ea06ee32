"""blob_floor.py's measurements, by role: ``runner`` (sizes, timing, peak
memory, the table), ``postgresql``, ``mariadb`` and ``local`` (SQLite and
a shared blob directory).  The bare drivers only, no relstorage code.
"""
