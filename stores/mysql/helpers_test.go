package mysqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

const defaultTestDSN = "root@tcp(127.0.0.1:3306)/test"

var quietLog = slog.New(slog.DiscardHandler)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func claimAt(key, fp, token string, now time.Time, lease time.Duration) store.Claim {
	return store.Claim{Scope: idem.Scope("", "POST", "/orders"), Key: key, Fingerprint: fp, Token: token, Now: now, LeaseEnd: now.Add(lease)}
}

// hold names the claim of token on (scope, key).
func hold(scope, key, token string) store.Hold {
	return store.Hold{Ref: store.Ref{Scope: scope, Key: key}, Token: token}
}

// ref names the record of (scope, key).
func ref(scope, key string) store.Ref { return store.Ref{Scope: scope, Key: key} }

// completeAt is the completion that stores res at now, kept until
// expiresAt; it is not failed (see failedAt).
func completeAt(res store.Result, now, expiresAt time.Time) store.Completion {
	return store.Completion{Result: res, Now: now, ExpiresAt: expiresAt}
}

// failedAt is completeAt for a failed outcome (an HTTP 4xx, a final
// error), which only an exactly-once commit tells apart.
func failedAt(res store.Result, now, expiresAt time.Time) store.Completion {
	c := completeAt(res, now, expiresAt)
	c.Failed = true
	return c
}

// result is an opaque result: the store keeps its bytes and never reads
// them, so tests use any (a head is never empty).
func result(head, body string) store.Result {
	return store.Result{Head: []byte(head), Body: []byte(body)}
}

// okResult is a small result, for tests that only need one stored.
var okResult = store.Result{Head: []byte("\x01ok")}

func testDSN() string {
	if d := os.Getenv("IDEM_TEST_MYSQL_DSN"); d != "" {
		return d
	}
	return defaultTestDSN
}

// testConfig parses the test DSN.
func testConfig(tb testing.TB) *mysql.Config {
	tb.Helper()
	cfg, err := mysql.ParseDSN(testDSN())
	if err != nil {
		tb.Fatalf("IDEM_TEST_MYSQL_DSN: %v", err)
	}
	return cfg
}

var (
	reachOnce sync.Once
	reachErr  error
)

// requireMySQL skips the test when the server is unreachable, and fails
// it instead when CI is set.
func requireMySQL(tb testing.TB) {
	tb.Helper()
	reachOnce.Do(func() {
		// The driver logs connection trouble to stderr; the tests provoke
		// plenty of it.
		mysql.SetLogger(log{})
		db, err := sql.Open("mysql", testDSN())
		if err != nil {
			reachErr = err
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		reachErr = db.PingContext(ctx)
	})
	if reachErr != nil {
		msg := "MySQL unreachable at " + testDSN() + " (set IDEM_TEST_MYSQL_DSN): " + reachErr.Error()
		if os.Getenv("CI") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
}

type log struct{}

func (log) Print(...any) {}

// newDB returns a pool on the test database with at most maxOpen
// connections (8 when 0), closed at cleanup; configure may change the
// driver's config first.
func newDB(tb testing.TB, maxOpen int, configure ...func(*mysql.Config)) *sql.DB {
	tb.Helper()
	requireMySQL(tb)
	cfg := testConfig(tb)
	for _, f := range configure {
		f(cfg)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	db := sql.OpenDB(conn)
	if maxOpen == 0 {
		maxOpen = 8
	}
	db.SetMaxOpenConns(maxOpen)
	db.SetMaxIdleConns(maxOpen)
	tb.Cleanup(func() { db.Close() })
	return db
}

// offlineDB returns a *sql.DB that is never used to reach a server, for
// tests of New's argument checks.
func offlineDB(tb testing.TB) *sql.DB {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/none")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func randomTable() string {
	var b [6]byte
	rand.Read(b[:])
	return "idem_test_" + hex.EncodeToString(b[:])
}

// newStore returns a store on db (a new pool when nil) in a fresh table
// that is dropped at cleanup.
func newStore(tb testing.TB, db *sql.DB, opts ...Option) *Store {
	tb.Helper()
	if db == nil {
		db = newDB(tb, 0)
	}
	table := randomTable()
	s, err := New(db, append([]Option{WithTable(table), WithLogger(quietLog)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.CreateSchema(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.Close()
		dropTable(tb, table)
	})
	return s
}

func dropTable(tb testing.TB, table string) {
	db, err := sql.Open("mysql", testDSN())
	if err != nil {
		tb.Errorf("drop %s: %v", table, err)
		return
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+quoteIdent(table)); err != nil {
		tb.Errorf("drop %s: %v", table, err)
	}
}

// count returns the number of rows in the store's table.
func count(tb testing.TB, s *Store) int {
	tb.Helper()
	var n int
	if err := s.db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+quoteIdent(s.table)).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}
