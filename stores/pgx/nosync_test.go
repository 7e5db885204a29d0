package pgxstore

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// txDB is a DB that runs everything in a transaction its caller began
// without being a pgx.Tx itself, as a tracing or unit-of-work wrapper is.
type txDB struct{ tx pgx.Tx }

func (d txDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return d.tx.Exec(ctx, sql, args...)
}
func (d txDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return d.tx.Query(ctx, sql, args...)
}
func (d txDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return d.tx.QueryRow(ctx, sql, args...)
}
func (d txDB) Begin(ctx context.Context) (pgx.Tx, error) { return d.tx.Begin(ctx) }

// TestNoSyncStaysInItsStatement: the claims, heartbeats and waiter marks
// that skip their WAL flush (WithAsyncClaims, exactly-once mode) do so
// only in their own transaction: in a transaction the caller began, which
// the store cannot tell from its DB, the caller's commit keeps its
// durability; and a pooled connection is left as it was.
func TestNoSyncStaysInItsStatement(t *testing.T) {
	ctx := t.Context()
	pool := newPool(t)
	base := newStore(t, pool)
	setting := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		var v string
		if err := q.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	claim := func(key string) store.Claim {
		return store.Claim{Scope: "s", Key: key, Fingerprint: "f", Token: "t-" + key, Now: t0, LeaseEnd: t0.Add(time.Minute)}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	before := setting(tx)
	s, err := New(txDB{tx}, WithTable(base.Table()), WithSweepInterval(0), WithNotify(false), WithAsyncClaims())
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]store.Store{"async claims": s, "exactly-once": s.ExactlyOnce()} {
		c := claim(name)
		if res, err := st.Claim(ctx, c); err != nil || !res.Acquired {
			t.Fatal(name, res, err)
		}
		if err := st.(store.Extender).Extend(ctx, c.Hold(), t0, t0.Add(2*time.Minute)); err != nil {
			t.Fatal(name, err)
		}
		if got := setting(tx); got != before {
			t.Errorf("%s: the caller's transaction runs with synchronous_commit %s after a claim and a heartbeat, was %s", name, got, before)
		}
	}
	// On the pool the setting ends with the statement's own transaction.
	one := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ps, err := New(one, WithTable(base.Table()), WithSweepInterval(0), WithAsyncClaims())
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ps.Claim(ctx, claim("pool")); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if got := setting(one); got != "on" {
		t.Errorf("a pooled connection runs with synchronous_commit %s after an async claim", got)
	}
}
