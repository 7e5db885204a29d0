package sqlitestore

import (
	"database/sql"
	"log/slog"
	"path/filepath"
	"testing"
)

var quietLog = slog.New(slog.DiscardHandler)

// newDB opens a fresh database file in the test's temporary directory
// with Open's settings, closed at cleanup. SQLite runs in this process:
// no server, so these tests never skip.
func newDB(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := Open(filepath.Join(tb.TempDir(), "idem.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// newStore returns a store on db (a fresh database when nil) with its
// table created, closed at cleanup.
func newStore(tb testing.TB, db *sql.DB, opts ...Option) *Store {
	tb.Helper()
	if db == nil {
		db = newDB(tb)
	}
	s, err := New(db, append([]Option{WithLogger(quietLog)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	if err := s.CreateSchema(tb.Context()); err != nil {
		tb.Fatal(err)
	}
	return s
}
