-- Schema of the idem PostgreSQL store (github.com/idemkit/idem/stores/pgx),
-- version 2.
--
-- {{table}} and {{index}} are placeholders: pgxstore.Schema(table) returns
-- this file with both filled in and quoted, ready for Flyway, Atlas, goose or
-- psql. Every statement is idempotent, and the same script upgrades a table
-- of version 1 (see the end).
--
-- scope, fingerprint and token are bytea because the store treats them as
-- opaque bytes (text cannot hold NUL or invalid UTF-8); key is printable
-- ASCII and compared byte-wise (COLLATE "C", immune to libc collation
-- changes). A completed record keeps the engine's result as it encoded it:
-- its head (the kind of outcome and, for HTTP, the status and headers) in
-- headers and its payload in body, bytes the store never parses, with status
-- NULL. A row completed by an earlier version keeps its HTTP status in status
-- and that version's header bytes in headers, and still replays. Times are
-- the engine's clock, never the server's: lease_end and expires_at are
-- rounded up and "now" down to the microsecond.
--
-- The primary key is the only index, and a completion changes none of its
-- columns, so completing a record is a HOT update: the new row version goes
-- on the same page, no index gets a new entry, and the WAL record holds only
-- the columns that changed (those a completion never changes come first).
-- The fillfactor keeps a tenth of each page for the completions of requests
-- still in flight; see "Schema" in the package documentation for responses
-- larger than a few hundred bytes.
CREATE TABLE IF NOT EXISTS {{table}} (
    scope        bytea       NOT NULL,
    key          text        COLLATE "C" NOT NULL,
    fingerprint  bytea       NOT NULL,
    token        bytea       NOT NULL,
    created_at   timestamptz NOT NULL,
    state        smallint    NOT NULL,  -- 1 in progress, 2 completed
    lease_end    timestamptz,           -- NULL once completed
    expires_at   timestamptz NOT NULL,
    status       integer,               -- NULL; set in rows completed by earlier versions
    body_omitted boolean     NOT NULL DEFAULT false,
    headers      bytea,                 -- the result's head; set when completed
    body         bytea,                 -- set when completed; NULL for a nil body
    waiters      boolean     NOT NULL DEFAULT false,  -- a waiter wants a notification
    PRIMARY KEY (scope, key)
) WITH (fillfactor = 90);

-- upgrade from version 1 --
-- Version 1 had no waiters column, a fillfactor of 100 and an index on
-- expires_at, which a completion changes, so a completion was never a HOT
-- update. Adding a column with a constant default only changes the catalog,
-- and the new fillfactor applies to pages filled from now on. The statements
-- lock the table for an instant; CreateSchema runs them only on a table of
-- version 1.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS waiters boolean NOT NULL DEFAULT false;
ALTER TABLE {{table}} SET (fillfactor = 90);
DROP INDEX IF EXISTS {{index}};
