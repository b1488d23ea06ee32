"""The JSON mirror's rows on PostgreSQL (see relstorage.adapters.mirror):
the state as JSONB."""
from relstorage.adapters.mirror import Mirror


class PostgreSQLMirror(Mirror):
    PARAM = '%s'
    STATE = 'CAST(%s AS jsonb)'
