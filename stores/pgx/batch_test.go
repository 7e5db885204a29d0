package pgxstore

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// countingDB counts the statements a store sends.
type countingDB struct {
	DB
	n atomic.Int32
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.n.Add(1)
	return c.DB.Exec(ctx, sql, args...)
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n.Add(1)
	return c.DB.Query(ctx, sql, args...)
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n.Add(1)
	return c.DB.QueryRow(ctx, sql, args...)
}

// TestExtendBatchOneStatement: a beat over many claims is one statement
// (one round trip, one commit), and extends each live claim on its own.
func TestExtendBatchOneStatement(t *testing.T) {
	pool := newPool(t)
	base := newStore(t, pool)
	db := &countingDB{DB: pool}
	s, err := New(db, WithTable(base.Table()), WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	now := time.Now()
	const n = 50
	refs := make([]store.Extension, n)
	for i := range refs {
		key := "k" + strconv.Itoa(i)
		if res, err := s.Claim(ctx, store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)}); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		refs[i] = store.Extension{Hold: hold("s", key, "tok"), LeaseEnd: now.Add(time.Hour)}
	}
	refs[7].Token = "another"
	db.n.Store(0)
	errs := s.ExtendBatch(ctx, now, refs)
	if got := db.n.Load(); got != 1 {
		t.Errorf("%d statements for a beat of %d claims, want 1", got, n)
	}
	for i, err := range errs {
		if (i == 7) != (err != nil) {
			t.Errorf("ref %d: %v", i, err)
		}
	}
	rec, ok, err := s.Get(ctx, ref("s", "k0"), now)
	if err != nil || !ok || rec.LeaseEnd.Before(now.Add(59*time.Minute)) {
		t.Errorf("k0 after the beat: lease end %v (%v %v), want an hour on", rec.LeaseEnd, ok, err)
	}
	rec, _, _ = s.Get(ctx, ref("s", "k7"), now)
	if rec.LeaseEnd.After(now.Add(2 * time.Minute)) {
		t.Errorf("k7 (wrong token) was extended to %v", rec.LeaseEnd)
	}
}

// TestExtendBatchTwoClaimsOnOneRecord: a stale claim and the claim that
// took its record over, in one batch, each get their own answer.
func TestExtendBatchTwoClaimsOnOneRecord(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	now := time.Now()
	stale := claimAt("k1", "fp", "tokA", now, time.Second)
	if r, err := s.Claim(ctx, stale); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	later := now.Add(2 * time.Second)
	taker := claimAt("k1", "fp", "tokB", later, time.Minute)
	if r, err := s.Claim(ctx, taker); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	lease := later.Add(time.Minute)
	errs := s.ExtendBatch(ctx, later, []store.Extension{{Hold: stale.Hold(), LeaseEnd: lease}, {Hold: taker.Hold(), LeaseEnd: lease}})
	if !errors.Is(errs[0], store.ErrLeaseLost) || errs[1] != nil {
		t.Errorf("stale, taker: %v; want ErrLeaseLost, nil", errs)
	}
}
