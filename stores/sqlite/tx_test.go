package sqlitestore

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
)

func txClaim(key, token string, now time.Time) idem.Claim {
	return idem.Claim{Scope: "s", Key: key, Fingerprint: "f", Token: token, Now: now, LeaseEnd: now.Add(time.Minute)}
}

func TestTxOutsideExactlyOnce(t *testing.T) {
	if tx, ok := Tx(t.Context()); ok || tx != nil {
		t.Fatalf("Tx of a bare context: %v %v, want nil, false", tx, ok)
	}
}

// TestBeginTxLost: BeginTx for a token that does not hold the claim
// returns idem.ErrLeaseLost and gives the write lock back.
func TestBeginTxLost(t *testing.T) {
	s := newStore(t, nil).ExactlyOnce()
	ctx := t.Context()
	now := time.Now()
	if res, err := s.Claim(ctx, txClaim("k", "t1", now)); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	for _, tc := range []struct{ key, token string }{{"k", "wrong"}, {"missing", "t1"}} {
		if _, err := s.BeginTx(ctx, "s", tc.key, tc.token); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("BeginTx(%q, %q): %v, want ErrLeaseLost", tc.key, tc.token, err)
		}
	}
	// The lock is free: a write goes through at once.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Complete(wctx, "s", "k", "t1", idem.Response{Status: 200}, now, now.Add(time.Hour)); err != nil {
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
	tx, err := s.BeginTx(ctx, "s", "a", "t")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.BeginTx(short, "s", "b", "t"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("BeginTx while another transaction runs: %v, want the context's deadline", err)
	}
	if err := tx.Commit(ctx, idem.Response{Status: 201}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	tx2, err := s.BeginTx(ctx, "s", "b", "t")
	if err != nil {
		t.Fatalf("BeginTx after the first committed: %v", err)
	}
	if err := tx2.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTxEndedByHandler: a handler that commits the transaction itself
// fails a success answer (its writes are outside the record) and stores
// an error answer on its own.
func TestTxEndedByHandler(t *testing.T) {
	s := newStore(t, nil).ExactlyOnce()
	ctx := t.Context()
	now := time.Now()
	for _, tc := range []struct {
		key    string
		status int
		stored bool
	}{{"ok", http.StatusCreated, false}, {"bad", http.StatusBadRequest, true}} {
		if res, err := s.Claim(ctx, txClaim(tc.key, "t", now)); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		itx, err := s.BeginTx(ctx, "s", tc.key, "t")
		if err != nil {
			t.Fatal(err)
		}
		sqlTx, _ := Tx(itx.Context(ctx))
		if err := sqlTx.Commit(); err != nil {
			t.Fatal(err)
		}
		err = itx.Commit(ctx, idem.Response{Status: tc.status}, now, now.Add(time.Hour))
		if (err == nil) != tc.stored {
			t.Fatalf("%d after the handler committed: %v, want stored %v", tc.status, err, tc.stored)
		}
		rec, ok, _ := s.Get(ctx, "s", tc.key, now)
		if done := ok && rec.State == idem.StateCompleted; done != tc.stored {
			t.Fatalf("%d: record completed %v, want %v", tc.status, done, tc.stored)
		}
	}
}
