-- Schema version 7 (Oracle): the table of the JSON mirror (see
-- postgresql.sql).  The json-state option is refused on Oracle (no
-- server to test it against here); the table keeps the versions in step.
-- Idempotent as relstorage runs it ("already exists" passed over).
CREATE TABLE object_json (
    zoid            NUMBER(20) NOT NULL PRIMARY KEY,
    tid             NUMBER(20) NOT NULL,
    class_module    VARCHAR2(255),
    class_name      VARCHAR2(255),
    state           CLOB CHECK (state IS JSON)
);

UPDATE schema_version SET version = 7 WHERE version = 6;
