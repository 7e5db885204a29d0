package idem

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/core/store"
)

func TestLostClaimWithTransactionAnswers503(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &txStore{testStore: newTestStore()}
		e, _ := newEngine(t, s, WithLease(3*time.Second), WithHeartbeat(time.Second))
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// An operator evicts the running claim.
			s.Delete(r.Context(), store.Ref{Scope: Scope("", "POST", ""), Key: "k"})
			time.Sleep(2 * time.Second)
			w.WriteHeader(201)
		}))
		if w := post(h, "/", "k", ""); w.Code != 503 || w.Header().Get("Retry-After") == "" {
			t.Errorf("a lost claim in a transaction: %d, want 503 with Retry-After (nothing was committed; a retry learns the outcome)", w.Code)
		}
		if s.committed != 0 || s.rolled == 0 {
			t.Errorf("committed %d, rolled back %d", s.committed, s.rolled)
		}
	})
}

// TestCorruptRecordFailsClosed: a record the engine cannot read answers
// 503, failing open or not: the store answered, and the record may say
// the work was done, so the handler never runs past it.
func TestCorruptRecordFailsClosed(t *testing.T) {
	for _, opts := range [][]Option{nil, {WithFailOpen()}} {
		s := newTestStore()
		e, ev := newEngine(t, s, opts...)
		runs := 0
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++; w.WriteHeader(201) }))
		post(h, "/", "k", "")
		for _, r := range s.recs {
			r.Result.Head = []byte{headHTTP, 0, 1, 0} // status 0
		}
		if w := post(h, "/", "k", ""); w.Code != 503 || runs != 1 {
			t.Errorf("replaying a corrupt record (%d options): %d, %d runs; want 503 and one run", len(opts), w.Code, runs)
		}
		if got := ev.outcomes(); got[1] != OutcomeStoreFailure {
			t.Errorf("outcomes %v", got)
		}
	}
}

func TestWaitNeverRunsBesideAFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &flakyStore{testStore: newTestStore()}
		// Two engines on one store, as two processes: the waiter asks the
		// store (in one engine it would wait on the local flight).
		e, ev := newEngine(t, fs, WithWait(5*time.Second), WithFailOpen())
		e2, _ := newEngine(t, fs, WithWait(5*time.Second), WithFailOpen())
		var inside, most atomic.Int32
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := inside.Add(1)
			most.Store(max(most.Load(), n))
			time.Sleep(2 * time.Second)
			inside.Add(-1)
		})
		h, h2 := e.Middleware()(handler), e2.Middleware()(handler)
		done := make(chan struct{})
		go func() { post(h, "/", "k", ""); close(done) }()
		synctest.Wait()
		fs.failAfter.Store(2) // the waiter's first look succeeds, its second fails
		if w := post(h2, "/", "k", ""); w.Code != 409 {
			t.Errorf("store failure while waiting: %d, want 409", w.Code)
		}
		<-done
		if most.Load() != 1 {
			t.Errorf("%d handlers ran at once", most.Load())
		}
		_ = ev
	})
}

// flakyStore fails Claim once failAfter counts down to zero.
type flakyStore struct {
	*testStore
	failAfter atomic.Int32
}

func (s *flakyStore) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	if s.failAfter.Load() > 0 && s.failAfter.Add(-1) == 0 {
		return store.ClaimResult{}, errors.New("flaky")
	}
	return s.testStore.Claim(ctx, c)
}
