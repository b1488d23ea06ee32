"""The JSON mirror's rows on MySQL and MariaDB (see
relstorage.adapters.mirror): their own upsert."""
from relstorage.adapters.mirror import Mirror


class MySQLMirror(Mirror):
    PARAM = '%s'
    STATE = '%s'
    UPSERT = """
        ON DUPLICATE KEY UPDATE
            tid = VALUES(tid), class_module = VALUES(class_module),
            class_name = VALUES(class_name), state = VALUES(state)"""
