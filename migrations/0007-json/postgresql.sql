-- relstorage schema version 7 (from 6), for PostgreSQL, both history
-- modes: the JSON mirror (the json-state option, docs/json.rst).
--
-- One row per object whose current revision a client with json-state
-- true wrote (or relstorage-mirror rendered): the tid of that revision,
-- the class its pickle names, and its state as JSON (NULL where it could
-- not be rendered).  History-preserving databases keep the current
-- revision's only.  The pickle in object_state stays the only source of
-- truth: nothing reads this table back into an object.
CREATE TABLE object_json (
    zoid            BIGINT NOT NULL PRIMARY KEY,
    tid             BIGINT NOT NULL,
    class_module    TEXT,
    class_name      TEXT,
    state           JSONB
);
CREATE INDEX object_json_class ON object_json (class_name, class_module);

UPDATE schema_version SET version = 7;
