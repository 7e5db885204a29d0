package sqlitestore

import (
	"database/sql"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
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

// claimAt is a claim of key in scope "s" by token at now, its lease
// ending lease later.
func claimAt(key, token string, now time.Time, lease time.Duration) store.Claim {
	return store.Claim{Scope: "s", Key: key, Fingerprint: "f", Token: token, Now: now, LeaseEnd: now.Add(lease)}
}

// ref names key in scope "s"; hold is token's claim on it.
func ref(key string) store.Ref          { return store.Ref{Scope: "s", Key: key} }
func hold(key, token string) store.Hold { return store.Hold{Ref: ref(key), Token: token} }

// done is a completion at now, kept until expiresAt, of a result whose
// head and body are opaque bytes (the store never reads them).
func done(body string, now, expiresAt time.Time) store.Completion {
	return store.Completion{Result: store.Result{Head: []byte{0x7f, 'h'}, Body: []byte(body)}, Now: now, ExpiresAt: expiresAt}
}
