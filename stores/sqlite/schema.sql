-- Schema of the idem SQLite store (github.com/idemkit/idem/stores/sqlite).
--
-- {{table}} and {{index}} are placeholders: sqlitestore.Schema(table)
-- returns this file with them filled in and double-quoted, ready for a
-- migration tool or the sqlite3 shell. Both statements are idempotent.
--
-- Every column that holds application bytes is a BLOB, compared byte for
-- byte. A completed row keeps the result's Head in headers and its Body in
-- body, opaque bytes the store never reads; status is NULL. Rows completed
-- before results were opaque have a status and headers in core's header wire
-- format, and still read. Times are the engine's "now" in microseconds since
-- the Unix epoch: lease_end and expires_at are rounded up and "now" down to
-- the microsecond.
CREATE TABLE IF NOT EXISTS {{table}} (
    scope        BLOB    NOT NULL,
    "key"        BLOB    NOT NULL,
    fingerprint  BLOB    NOT NULL,
    token        BLOB    NOT NULL,
    state        INTEGER NOT NULL,            -- 1 in progress, 2 completed
    status       INTEGER,                     -- NULL; set only in rows completed before results were opaque
    headers      BLOB,                        -- the result's Head when completed
    body         BLOB,                        -- the result's Body when completed; NULL for a nil or omitted body
    body_omitted INTEGER NOT NULL DEFAULT 0,  -- 1 when the body was too large to keep
    created_at   INTEGER NOT NULL,
    lease_end    INTEGER,                     -- NULL once completed
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (scope, "key")
);
CREATE INDEX IF NOT EXISTS {{index}} ON {{table}} (expires_at);
