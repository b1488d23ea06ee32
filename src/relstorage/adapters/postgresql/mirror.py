"""The JSON mirror's rows on PostgreSQL (see relstorage.adapters.mirror):
the state as JSONB, read with its operators and JSON paths."""
import json

from relstorage.adapters.mirror import Mirror


class PostgreSQLMirror(Mirror):
    PARAM = '%s'
    STATE = 'CAST(%s AS jsonb)'
    ONE_ARRAY = True

    #: Dropped at the end of the transaction: behind a transaction pooler
    #: the next one may run in another session.
    TEMP_JSON = """
        CREATE TEMP TABLE IF NOT EXISTS temp_json (
            zoid BIGINT NOT NULL PRIMARY KEY, tid BIGINT,
            class_module TEXT, class_name TEXT, state JSONB
        ) ON COMMIT DROP"""

    def _delete(self, deleted):
        if not deleted:
            return []
        return [('DELETE FROM object_json WHERE zoid = ANY(%s)',
                 (list(deleted),))]

    def _bulk(self, rows, with_tid, table='object_json'):
        # (The states are JSON already: put in the array as they are.)
        n = 1 if with_tid else 0
        values = (f"e->>{n + 1}, e->>{n + 2}, "
                  f"NULLIF(e->{n + 3}, 'null'::jsonb) "
                  f'FROM jsonb_array_elements(CAST(%s AS jsonb)) e')
        same = ' AND c.tid = CAST(e->>1 AS bigint)' if with_tid else ''
        return self._from_array(rows, table, values,
                                'CAST(e->>0 AS bigint)', same)

    def _at(self, path, value):
        # Containment ({"data": {"title": VALUE}}), which a GIN index on
        # state serves (docs/json.rst, "Indexes").
        for key in reversed(path):
            value = {str(key): value}
        return 'state @> CAST(%s AS jsonb)', [json.dumps(value)]

    def referring(self, cursor, oid, limit=100):
        cursor.execute(
            'SELECT zoid, class_module, class_name FROM object_json '
            "WHERE jsonb_path_exists(state, "
            "'strict $.**.\"!ref\" ? (@ == $oid)', "
            "jsonb_build_object('oid', CAST(%s AS bigint))) "
            'ORDER BY zoid LIMIT %s', (oid, limit))
        return [tuple(row) for row in cursor.fetchall()]
