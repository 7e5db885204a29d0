-- Schema of the idem PostgreSQL store (github.com/idemkit/idem/stores/pgx).
--
-- {{table}} and {{index}} are placeholders: pgxstore.Schema(table) returns
-- this file with both filled in and quoted, ready for Flyway, Atlas, goose or
-- psql. Every statement is idempotent.
--
-- scope, fingerprint and token are bytea because the store treats them as
-- opaque bytes (text cannot hold NUL or invalid UTF-8); key is printable
-- ASCII and compared byte-wise (COLLATE "C", immune to libc collation
-- changes). headers is bytea in the store's own length-prefixed format, which
-- keeps every header value exactly (jsonb cannot hold NUL or non-UTF-8
-- obs-text). Times are the engine's clock, never the server's: lease_end and
-- expires_at are rounded up and "now" down to the microsecond.
CREATE TABLE IF NOT EXISTS {{table}} (
    scope        bytea       NOT NULL,
    key          text        COLLATE "C" NOT NULL,
    fingerprint  bytea       NOT NULL,
    token        bytea       NOT NULL,
    state        smallint    NOT NULL,  -- 1 in progress, 2 completed
    status       integer,               -- set when completed
    headers      bytea,                 -- set when completed; NULL for nil headers
    body         bytea,                 -- set when completed; NULL for a nil body
    body_omitted boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL,
    lease_end    timestamptz,           -- NULL once completed
    expires_at   timestamptz NOT NULL,
    waiters      boolean     NOT NULL DEFAULT false,  -- a waiter wants a notification
    PRIMARY KEY (scope, key)
);

-- Tables created before the waiters column get it; a column with a constant
-- default only changes the catalog.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS waiters boolean NOT NULL DEFAULT false;

CREATE INDEX IF NOT EXISTS {{index}} ON {{table}} (expires_at);
