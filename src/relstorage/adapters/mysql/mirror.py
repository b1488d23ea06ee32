"""The JSON mirror's rows on MySQL and MariaDB (see
relstorage.adapters.mirror): their own upsert and JSON functions."""
import json

from relstorage.adapters.mirror import Mirror
from relstorage.adapters.mirror import json_path


class MySQLMirror(Mirror):
    PARAM = '%s'
    STATE = '%s'
    ONE_ARRAY = True
    UPSERT = """
        ON DUPLICATE KEY UPDATE
            tid = VALUES(tid), class_module = VALUES(class_module),
            class_name = VALUES(class_name), state = VALUES(state)"""

    #: (A temporary table lives as long as the session: spill_statements
    #: empties it at each transaction's first spill.)
    TEMP_JSON = """
        CREATE TEMPORARY TABLE IF NOT EXISTS temp_json (
            zoid BIGINT NOT NULL PRIMARY KEY, tid BIGINT,
            class_module VARCHAR(255), class_name VARCHAR(255), state JSON
        ) ENGINE = InnoDB"""

    def _bulk(self, rows, with_tid, table='object_json'):
        # JSON_TABLE: MySQL 8, MariaDB 10.6 and later, what this adapter
        # supports.  A JSON null reads as the text null: made SQL's NULL.
        n = 1 if with_tid else 0
        tid = "tid BIGINT PATH '$[1]', " if with_tid else ''
        values = ("t.module, t.name, NULLIF(t.state, 'null') "
                  "FROM JSON_TABLE(%s, '$[*]' COLUMNS ("
                  f"zoid BIGINT PATH '$[0]', {tid}"
                  f"module VARCHAR(255) PATH '$[{n + 1}]', "
                  f"name VARCHAR(255) PATH '$[{n + 2}]', "
                  f"state JSON PATH '$[{n + 3}]')) t")
        same = ' AND c.tid = t.tid' if with_tid else ''
        return self._from_array(rows, table, values, 't.zoid', same)

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
