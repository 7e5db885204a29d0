-- Schema of the idem MySQL/MariaDB store (github.com/idemkit/idem/stores/mysql).
--
-- {{table}} is a placeholder: mysqlstore.Schema(table) returns this file with
-- it filled in and backquoted, ready for Flyway, Atlas, goose or the mysql
-- client. The statement is idempotent and needs no DELIMITER.
--
-- Every column that holds application bytes is binary (VARBINARY, BLOB):
-- compared byte for byte, no character set, no collation, no trailing-space
-- padding, NUL and invalid UTF-8 kept. scope is the record's scope, or, for a
-- scope longer than 512 bytes, its first 512 bytes followed by its SHA-256, so
-- the primary key stays at most 799 bytes (InnoDB allows 3072). A completed
-- record keeps the engine's result as opaque bytes: its head in headers, its
-- body in body, and a NULL status; a completed row with a status was written
-- before results were opaque (headers then holds the header bytes alone) and
-- still reads as it did. Times are the engine's "now" (which the engine aligns
-- with the server's clock), in microseconds since the Unix epoch: lease_end and
-- expires_at are rounded up and "now" down to the microsecond.
--
-- tx_mark is written by an exactly-once transaction when it starts, and its
-- completion requires it, so a completion whose transaction the server rolled
-- back (a deadlock) finds no mark and fails. It is committed only when a
-- handler ends that transaction itself. A table created before the column
-- existed gets it from CreateSchema, or from:
--   ALTER TABLE {{table}} ADD COLUMN tx_mark VARBINARY(16) NULL;
CREATE TABLE IF NOT EXISTS {{table}} (
    scope        VARBINARY(544) NOT NULL,
    `key`        VARBINARY(255) NOT NULL,
    fingerprint  BLOB           NOT NULL,
    token        VARBINARY(255) NOT NULL,
    state        TINYINT        NOT NULL,  -- 1 in progress, 2 completed
    status       SMALLINT       NULL,      -- NULL, but in completed rows of earlier versions
    headers      MEDIUMBLOB     NULL,      -- the result's head, set when completed
    body         LONGBLOB       NULL,      -- set when completed; NULL for a nil body
    body_omitted BOOLEAN        NOT NULL DEFAULT FALSE,
    created_at   BIGINT         NOT NULL,
    lease_end    BIGINT         NULL,      -- NULL once completed
    expires_at   BIGINT         NOT NULL,
    tx_mark      VARBINARY(16)  NULL,      -- set inside an exactly-once transaction
    PRIMARY KEY (scope, `key`),
    KEY expires_at_idx (expires_at)
) ENGINE = InnoDB;
