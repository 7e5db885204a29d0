package sqlitestore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
)

func txClaim(key, token string, now time.Time) store.Claim {
	return claimAt(key, token, now, time.Minute)
}

func TestTxOutsideExactlyOnce(t *testing.T) {
	if tx, ok := Tx(t.Context()); ok || tx != nil {
		t.Fatalf("Tx of a bare context: %v %v, want nil, false", tx, ok)
	}
}

// TestBeginTxLost: BeginTx for a token that does not hold the claim
// returns store.ErrLeaseLost and gives the write lock back.
func TestBeginTxLost(t *testing.T) {
	s := newStore(t, nil).ExactlyOnce()
	ctx := t.Context()
	now := time.Now()
	if res, err := s.Claim(ctx, txClaim("k", "t1", now)); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	for _, tc := range []struct{ key, token string }{{"k", "wrong"}, {"missing", "t1"}} {
		if _, err := s.BeginTx(ctx, hold(tc.key, tc.token)); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("BeginTx(%q, %q): %v, want ErrLeaseLost", tc.key, tc.token, err)
		}
	}
	// The lock is free: a write goes through at once.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Complete(wctx, hold("k", "t1"), done("ok", now, now.Add(time.Hour))); err != nil {
		t.Fatalf("Complete after failed BeginTx: %v", err)
	}
}

// TestBeginTxWaitsForLock: while one transaction runs, another BeginTx
// waits for the write lock, at most until its context ends.
func TestBeginTxWaitsForLock(t *testing.T) {
	s := newStore(t, nil).ExactlyOnce()
	ctx := t.Context()
	now := time.Now()
	for _, k := range []string{"a", "b"} {
		if res, err := s.Claim(ctx, txClaim(k, "t", now)); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	tx, err := s.BeginTx(ctx, hold("a", "t"))
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.BeginTx(short, hold("b", "t")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("BeginTx while another transaction runs: %v, want the context's deadline", err)
	}
	if err := tx.Commit(ctx, done("created", now, now.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	tx2, err := s.BeginTx(ctx, hold("b", "t"))
	if err != nil {
		t.Fatalf("BeginTx after the first committed: %v", err)
	}
	if err := tx2.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTxEndedByHandler: a handler that commits the transaction itself
// fails an outcome that is not Failed (its writes are outside the record)
// and stores a Failed one on its own.
func TestTxEndedByHandler(t *testing.T) {
	s := newStore(t, nil).ExactlyOnce()
	ctx := t.Context()
	now := time.Now()
	for _, tc := range []struct {
		key    string
		failed bool
	}{{"ok", false}, {"bad", true}} {
		if res, err := s.Claim(ctx, txClaim(tc.key, "t", now)); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		itx, err := s.BeginTx(ctx, hold(tc.key, "t"))
		if err != nil {
			t.Fatal(err)
		}
		sqlTx, _ := Tx(itx.Context(ctx))
		if err := sqlTx.Commit(); err != nil {
			t.Fatal(err)
		}
		c := done(tc.key, now, now.Add(time.Hour))
		c.Failed = tc.failed
		err = itx.Commit(ctx, c)
		if stored := tc.failed; (err == nil) != stored {
			t.Fatalf("Failed %v after the handler committed: %v, want stored %v", tc.failed, err, stored)
		}
		rec, ok, _ := s.Get(ctx, ref(tc.key), now)
		if completed := ok && rec.State == store.Completed; completed != tc.failed {
			t.Fatalf("Failed %v: record completed %v, want %v", tc.failed, completed, tc.failed)
		}
	}
}
