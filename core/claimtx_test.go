package idem

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/core/store"
)

// claimTxStore claims inside its transactions (store.TxClaimer), as
// mysqlstore's exactly-once mode does: the claim lives in the transaction,
// which holds it (store.ClaimHolder), and its Rollback ends the claim.
type claimTxStore struct {
	*txStore
	mu          sync.Mutex
	claimTx     int
	beginTx     int
	nilTx       bool // ClaimTx breaks its contract: Acquired without a Tx
	extendCalls int
	held        map[string]bool // keys whose transaction is open: not takeable, past the lease too
}

type claimedTx struct {
	testTx
	cs   *claimTxStore
	done bool
}

func (t *claimedTx) end() {
	t.done = true
	t.cs.mu.Lock()
	delete(t.cs.held, t.h.Key)
	t.cs.mu.Unlock()
}

func (t *claimedTx) HoldsClaim() bool { return true }

func (t *claimedTx) Commit(ctx context.Context, c store.Completion) error {
	defer t.end()
	return t.testTx.Commit(ctx, c)
}

func (t *claimedTx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.end()
	t.s.rolled++
	// The claim went with the transaction.
	t.s.testStore.Release(ctx, t.h) //nolint:errcheck // a test store's
	return nil
}

func (s *claimTxStore) ClaimTx(ctx context.Context, c store.Claim) (store.ClaimResult, store.Tx, error) {
	s.mu.Lock()
	s.claimTx++
	held := s.held[c.Key]
	s.mu.Unlock()
	if held {
		s.testStore.mu.Lock()
		rec := s.recs[[2]string{c.Scope, c.Key}].Record
		s.calls["claim"]++
		s.testStore.mu.Unlock()
		return store.ClaimResult{Existing: &rec}, nil, nil
	}
	res, err := s.testStore.Claim(ctx, c)
	if err != nil || !res.Acquired {
		return res, nil, err
	}
	if s.nilTx {
		return res, nil, nil
	}
	s.mu.Lock()
	if s.held == nil {
		s.held = map[string]bool{}
	}
	s.held[c.Key] = true
	s.mu.Unlock()
	return res, &claimedTx{testTx: testTx{s.txStore, store.Hold{Ref: store.Ref{Scope: c.Scope, Key: c.Key}, Token: c.Token}}, cs: s}, nil
}

func (s *claimTxStore) BeginTx(ctx context.Context, h store.Hold) (store.Tx, error) {
	s.mu.Lock()
	s.beginTx++
	s.mu.Unlock()
	return s.txStore.BeginTx(ctx, h)
}

func (s *claimTxStore) Extend(ctx context.Context, h store.Hold, now, leaseEnd time.Time) error {
	s.mu.Lock()
	s.extendCalls++
	s.mu.Unlock()
	return s.testStore.Extend(ctx, h, now, leaseEnd)
}

// TestClaimTxIsTheClaim: with a store.TxClaimer the engine claims with
// ClaimTx alone (no Claim, no BeginTx), sends no heartbeat however long
// the handler runs (the transaction holds the claim), commits the record
// with it, and after a 5xx rolls it back, which frees the key (the
// release after it finds nothing, and reports no error); a duplicate
// meanwhile gets 409, and a retry after the commit the replay.
func TestClaimTxIsTheClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &claimTxStore{txStore: &txStore{testStore: newTestStore()}}
		e, evs := newEngine(t, s, WithLease(3*time.Second))
		defer e.Close(context.Background())
		runs := 0
		release := make(chan struct{})
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if r.Header.Get("X-Slow") != "" {
				<-release
			}
			if r.Header.Get("X-Fail") != "" {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		if code := sendWith(h, "fail", "X-Fail"); code != http.StatusServiceUnavailable {
			t.Fatalf("failing handler: %d", code)
		}
		// The rollback took the claim: the release after it finds
		// nothing, which is no error to report.
		if ev := evs.evs[0]; ev.Outcome != OutcomeReleased || ev.Err != nil {
			t.Errorf("5xx: outcome %s, error %v; want released, no error", ev.Outcome, ev.Err)
		}
		if w := post(h, "/", "fail", ""); w.Code != http.StatusCreated || runs != 2 {
			t.Errorf("retry after a 5xx rolled the claim back: %d, runs %d; want 201 from a second run", w.Code, runs)
		}
		done := make(chan int)
		go func() {
			done <- sendWith(h, "slow", "X-Slow")
		}()
		synctest.Wait()
		time.Sleep(10 * time.Second) // past three leases
		if w := post(h, "/", "slow", ""); w.Code != http.StatusConflict {
			t.Errorf("duplicate while the first runs, past its lease: %d, want 409", w.Code)
		}
		close(release)
		if code := <-done; code != http.StatusCreated {
			t.Errorf("slow first request: %d", code)
		}
		if w := post(h, "/", "slow", ""); w.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry after the commit: %d, want the replay", w.Code)
		}
		if runs != 3 || s.committed != 2 || s.rolled != 1 {
			t.Errorf("runs %d, committed %d, rolled back %d; want 3, 2, 1", runs, s.committed, s.rolled)
		}
		if s.count("claim") != s.claimTx || s.beginTx != 0 || s.extendCalls != 0 {
			t.Errorf("Claim calls %d besides ClaimTx's %d, BeginTx %d, Extend %d; want ClaimTx alone", s.count("claim")-s.claimTx, s.claimTx, s.beginTx, s.extendCalls)
		}
	})
}

// TestClaimTxWithoutTxIsAFailure: a ClaimTx that acquires without
// returning the transaction breaks its contract; the engine answers 503
// and runs nothing, rather than run the handler with no transaction.
func TestClaimTxWithoutTxIsAFailure(t *testing.T) {
	s := &claimTxStore{txStore: &txStore{testStore: newTestStore()}, nilTx: true}
	e, _ := newEngine(t, s)
	defer e.Close(context.Background())
	ran := false
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true }))
	if w := post(h, "/", "k", ""); w.Code != http.StatusServiceUnavailable || ran {
		t.Errorf("ClaimTx acquired without a Tx: %d, handler ran %v; want 503 and no run", w.Code, ran)
	}
}

// sendWith posts to h with key and the header named flag set, and
// returns the status.
func sendWith(h http.Handler, key, flag string) int {
	r := httptest.NewRequest("POST", "/", strings.NewReader(""))
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set(flag, "1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}
