"""The JSON mirror's rows on MySQL and MariaDB (see
relstorage.adapters.mirror): their own upsert and JSON functions."""
import json

from relstorage.adapters.mirror import Mirror
from relstorage.adapters.mirror import json_path


class MySQLMirror(Mirror):
    PARAM = '%s'
    STATE = '%s'
    UPSERT = """
        ON DUPLICATE KEY UPDATE
            tid = VALUES(tid), class_module = VALUES(class_module),
            class_name = VALUES(class_name), state = VALUES(state)"""

    def _at(self, path, value):
        # The value at the path is the one given, or (JSON_CONTAINS's way)
        # an array that holds it.
        return ('JSON_CONTAINS(state, %s, %s)',
                [json.dumps(value), json_path(path)])

    def referring(self, cursor, oid, limit=100):
        cursor.execute(
            'SELECT zoid, class_module, class_name FROM object_json '
            "WHERE JSON_CONTAINS(JSON_EXTRACT(state, '$**.\"!ref\"'), %s) "
            'ORDER BY zoid LIMIT %s', (str(int(oid)), limit))
        return [tuple(row) for row in cursor.fetchall()]
