-- relstorage schema version 7 (from 6), for MySQL and MariaDB, both
-- history modes: the JSON mirror (see postgresql.sql).  MariaDB's JSON is
-- LONGTEXT checked with JSON_VALID; MySQL's a binary JSON type.
-- Idempotent, like the steps before it.
CREATE TABLE IF NOT EXISTS object_json (
    zoid            BIGINT NOT NULL PRIMARY KEY,
    tid             BIGINT NOT NULL,
    class_module    VARCHAR(255),
    class_name      VARCHAR(255),
    state           JSON,
    KEY object_json_class (class_name, class_module)
) ENGINE = InnoDB;

UPDATE schema_version SET version = 7 WHERE version = 6;
