"""The JSON mirror's rows on PostgreSQL (see relstorage.adapters.mirror):
the state as JSONB, read with its operators and JSON paths."""
import json

from relstorage.adapters.mirror import Mirror


class PostgreSQLMirror(Mirror):
    PARAM = '%s'
    STATE = 'CAST(%s AS jsonb)'

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
