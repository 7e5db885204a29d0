package pgxstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const defaultTestURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func testURL() string {
	if u := os.Getenv("IDEM_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return defaultTestURL
}

var (
	reachOnce sync.Once
	reachErr  error
)

// requirePostgres skips the test when PostgreSQL is unreachable, and fails
// it instead when CI is set.
func requirePostgres(tb testing.TB) {
	tb.Helper()
	reachOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, testURL())
		if err != nil {
			reachErr = err
			return
		}
		reachErr = c.Ping(ctx)
		c.Close(ctx)
	})
	if reachErr != nil {
		msg := "PostgreSQL unreachable at " + testURL() + " (set IDEM_TEST_POSTGRES_URL): " + reachErr.Error()
		if os.Getenv("CI") != "" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
}

// newPool returns a pool on the test database, closed at cleanup.
func newPool(tb testing.TB, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	requirePostgres(tb)
	cfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 8
	for _, f := range configure {
		f(cfg)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

func randomTable() string {
	var b [6]byte
	rand.Read(b[:])
	return "idem_test_" + hex.EncodeToString(b[:])
}

// newStore returns a store on pool (a new pool when nil) in a fresh table
// that is dropped at cleanup. Its background sweeper is off unless opts
// turn it on, so tests see the rows they wrote.
func newStore(tb testing.TB, pool *pgxpool.Pool, opts ...Option) *Store {
	tb.Helper()
	if pool == nil {
		pool = newPool(tb)
	}
	table := randomTable()
	s, err := New(pool, append([]Option{WithTable(table), WithSweepInterval(0)}, opts...)...)
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, testURL())
	if err != nil {
		tb.Errorf("drop %s: %v", table, err)
		return
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()); err != nil {
		tb.Errorf("drop %s: %v", table, err)
	}
}

func ref(scope, key string) store.Ref { return store.Ref{Scope: scope, Key: key} }

func hold(scope, key, token string) store.Hold {
	return store.Hold{Ref: ref(scope, key), Token: token}
}

// result is an outcome as the engine hands it to a store: opaque bytes,
// here a head that names n and no body. The store never reads them.
func result(n int) store.Result {
	return store.Result{Head: []byte("\xf0head " + strconv.Itoa(n))}
}

// completion completes with r at now, kept until expiresAt.
func completion(r store.Result, now, expiresAt time.Time) store.Completion {
	return store.Completion{Result: r, Now: now, ExpiresAt: expiresAt}
}
