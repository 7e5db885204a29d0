package sqlitestore

import (
	"context"
	"database/sql"
	_ "embed" // for schemaTemplate
	"fmt"
	"os"
	"strings"

	"github.com/idemkit/idem/stores/sqlbase"
	_ "modernc.org/sqlite" // registers the "sqlite" driver Open uses
)

// DefaultTable is the table a Store uses unless WithTable names another.
const DefaultTable = sqlbase.DefaultTable

//go:embed schema.sql
var schemaTemplate string

// maxTable is the longest table name the store takes.
const maxTable = 64

// validTable checks a table name: only names matching
// ^[A-Za-z_][A-Za-z0-9_]{0,63}$ are accepted, and they are double-quoted
// wherever they appear in SQL. Names starting with "sqlite_" are SQLite's
// own and refused.
func validTable(table string) error {
	if err := sqlbase.CheckTable(table, maxTable); err != nil {
		return fmt.Errorf("%w: %w", ErrBadOption, err)
	}
	if strings.HasPrefix(strings.ToLower(table), "sqlite_") {
		return fmt.Errorf("%w: table name %q starts with sqlite_, which SQLite reserves", ErrBadOption, table)
	}
	return nil
}

func quoteIdent(name string) string { return `"` + name + `"` }

// Schema returns the SQL that creates the store's table and its expiry
// index for the given table name (DefaultTable when empty): what
// CreateSchema runs, for projects that manage their schema with a
// migration tool. Both statements are IF NOT EXISTS. The template is
// schema.sql in this module:
//
//	CREATE TABLE IF NOT EXISTS "idempotency_keys" (
//	    scope BLOB NOT NULL, "key" BLOB NOT NULL,
//	    fingerprint BLOB NOT NULL, token BLOB NOT NULL,
//	    state INTEGER NOT NULL,              -- 1 in progress, 2 completed
//	    status INTEGER,                      -- NULL but in rows written before results were opaque
//	    headers BLOB, body BLOB,             -- the result's Head and Body
//	    body_omitted INTEGER NOT NULL DEFAULT 0,
//	    created_at INTEGER NOT NULL,         -- Unix microseconds
//	    lease_end INTEGER,                   -- NULL once completed
//	    expires_at INTEGER NOT NULL,
//	    PRIMARY KEY (scope, "key"));
//	CREATE INDEX IF NOT EXISTS "idempotency_keys_expires_at" ON "idempotency_keys" (expires_at);
//
// Schema returns an error wrapping ErrBadOption for a bad table name (see
// WithTable).
func Schema(table string) (string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := validTable(table); err != nil {
		return "", err
	}
	return strings.NewReplacer(
		"{{table}}", quoteIdent(table),
		"{{index}}", quoteIdent(table+"_expires_at"),
	).Replace(schemaTemplate), nil
}

// CreateSchema creates the store's table and index if they do not exist
// (Schema), in one transaction. It is safe to run at every start-up.
func (s *Store) CreateSchema(ctx context.Context) error {
	q, err := Schema(s.table)
	if err != nil {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("sqlitestore: create schema: %w", err)
	}
	defer s.unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlitestore: create schema: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	if _, err := tx.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("sqlitestore: create schema: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlitestore: create schema: %w", err)
	}
	return nil
}

// DefaultBusyTimeout is the busy timeout Open sets, in milliseconds: how
// long a connection waits for another one's write lock (an application's
// own write, another process) before it fails with SQLITE_BUSY. The
// store's own writes never wait for each other; see the package doc.
const DefaultBusyTimeout = 10000

// Open opens the SQLite database file at path (created if missing) with
// the settings the store expects, for the store and the application to
// share:
//
//	journal_mode = WAL    readers never block the writer, nor it them
//	busy_timeout = 10000  wait up to 10 s for another connection's write lock
//	synchronous  = FULL   a commit is on disk (the WAL fsynced) when it returns
//	foreign_keys = ON     enforce REFERENCES, deferred ones at COMMIT
//	_txlock=immediate     db.BeginTx takes the write lock at BEGIN, so a
//	                      transaction that reads then writes never fails
//	                      with SQLITE_BUSY_SNAPSHOT
//
// It pings the database once, so a path that cannot be opened fails here.
// A file it creates is its owner's alone (mode 0600, which SQLite gives
// the WAL and shared-memory files too): it holds the stored responses.
// path is a plain file name: one that holds '?' or starts with "file:" or
// is ":memory:" is refused with an error wrapping ErrBadOption (WAL needs a
// file; open a URI yourself with sql.Open("sqlite", dsn) and the same
// settings). Close the returned DB when done; the store does not.
func Open(path string) (*sql.DB, error) {
	switch {
	case path == "", path == ":memory:", strings.HasPrefix(path, "file:"), strings.ContainsRune(path, '?'):
		return nil, fmt.Errorf("%w: path %q is not a plain file name (WAL needs a file; a URI takes its settings in its own query)", ErrBadOption, path)
	}
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close() // created empty, owner only; an existing file keeps its mode
	}
	dsn := fmt.Sprintf("%s?_pragma=journal_mode(WAL)&_pragma=busy_timeout(%d)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)&_txlock=immediate",
		path, DefaultBusyTimeout)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	return db, nil
}
