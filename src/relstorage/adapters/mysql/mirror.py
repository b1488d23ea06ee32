"""The JSON mirror's rows on MySQL and MariaDB (see
relstorage.adapters.mirror): their own upsert and JSON functions."""
import json

from relstorage.adapters.mirror import Mirror
from relstorage.adapters.mirror import json_path
from relstorage.adapters.mirror import rows_array
from relstorage.adapters.objects import batched


class MySQLMirror(Mirror):
    PARAM = '%s'
    STATE = '%s'
    ONE_ARRAY = True
    UPSERT = """
        ON DUPLICATE KEY UPDATE
            tid = VALUES(tid), class_module = VALUES(class_module),
            class_name = VALUES(class_name), state = VALUES(state)"""

    def statements(self, rows, deleted):
        """One statement for all rows: a JSON array of ``[zoid, module,
        name, state]`` read by JSON_TABLE (MySQL 8, MariaDB 10.6 and
        later, what this adapter supports), where the shared form sends
        200 rows of five parameters a statement.  A JSON null of
        JSON_TABLE reads as the text null: made SQL's NULL."""
        out = [self._bulk(rows, False)] if rows else []
        for chunk in batched(deleted, 500):
            out.append((
                'DELETE FROM object_json WHERE zoid IN ('
                + ', '.join(['%s'] * len(chunk)) + ')', list(chunk)))
        return out

    def _bulk(self, rows, with_tid):
        n = 1 if with_tid else 0
        tid = "tid BIGINT PATH '$[1]', " if with_tid else ''
        same = ' AND c.tid = t.tid' if with_tid else ''
        return (
            'INSERT INTO object_json '
            '(zoid, tid, class_module, class_name, state) '
            "SELECT c.zoid, c.tid, t.module, t.name, "
            "NULLIF(t.state, 'null') "
            "FROM JSON_TABLE(%s, '$[*]' COLUMNS ("
            f"zoid BIGINT PATH '$[0]', {tid}"
            f"module VARCHAR(255) PATH '$[{n + 1}]', "
            f"name VARCHAR(255) PATH '$[{n + 2}]', "
            f"state JSON PATH '$[{n + 3}]')) t "
            f'JOIN {self.current} c ON c.zoid = t.zoid' + same
            + self.UPSERT, (rows_array(rows),))

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
