package idem

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/core/store"
)

// TestSingleFlightStorm: 50 duplicates reach the engine while the first
// request with their key runs. The store sees one claim: in reject mode
// each duplicate gets 409 from the local flight, in wait mode each gets
// the first one's answer, body included, as soon as it is stored. A
// duplicate with another body gets 422 without a store call either.
func TestSingleFlightStorm(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
		want int // the duplicates' status
	}{
		{"reject", nil, http.StatusConflict},
		{"wait", []Option{WithWait(10 * time.Second)}, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newTestStore()
				e, _ := newEngine(t, s, tc.opts...)
				var runs atomic.Int32
				release := make(chan struct{})
				h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					<-release
					w.WriteHeader(http.StatusCreated)
					w.Write([]byte("order 1"))
				}))
				first := make(chan int)
				go func() { first <- post(h, "/", "k", "x").Code }()
				synctest.Wait()
				var wg sync.WaitGroup
				codes := make([]int, 50)
				bodies := make([]string, 50)
				for i := range codes {
					wg.Go(func() {
						w := post(h, "/", "k", "x")
						codes[i], bodies[i] = w.Code, w.Body.String()
					})
				}
				synctest.Wait()
				if w := post(h, "/", "k", "other"); w.Code != http.StatusUnprocessableEntity {
					t.Errorf("another body while the key runs: %d, want 422", w.Code)
				}
				close(release)
				wg.Wait()
				if c := <-first; c != http.StatusCreated {
					t.Fatalf("first: %d", c)
				}
				for i, c := range codes {
					if c != tc.want || c == http.StatusCreated && bodies[i] != "order 1" {
						t.Fatalf("duplicate %d: %d %q, want %d", i, c, bodies[i], tc.want)
					}
				}
				if n := s.count("claim"); n != 1 {
					t.Errorf("the store saw %d claims for 52 requests, want 1", n)
				}
				if runs.Load() != 1 {
					t.Errorf("the handler ran %d times", runs.Load())
				}
			})
		})
	}
}

// TestSingleFlightReleased: a first request that fails with a 5xx releases
// the key; the duplicates that waited on it ask the store, and one of
// them runs.
func TestSingleFlightReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s, WithWait(10*time.Second))
		var runs atomic.Int32
		release := make(chan struct{})
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				<-release
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}))
		go post(h, "/", "k", "")
		synctest.Wait()
		var wg sync.WaitGroup
		codes := make([]int, 5)
		for i := range codes {
			wg.Go(func() { codes[i] = post(h, "/", "k", "").Code })
		}
		synctest.Wait()
		close(release)
		wg.Wait()
		if runs.Load() != 2 {
			t.Errorf("the handler ran %d times, want 2 (the failed first, then one retry)", runs.Load())
		}
		for _, c := range codes {
			if c != http.StatusCreated {
				t.Errorf("codes %v: want every waiter to get the retry's 201 (run or replayed)", codes)
				break
			}
		}
	})
}

// TestSingleFlightEvictedElsewhere: a key evicted through another engine
// (another instance's admin handler) while this engine runs it is freed
// here at the next heartbeat, which finds the claim gone.
func TestSingleFlightEvictedElsewhere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		a, _ := newEngine(t, s, WithLease(3*time.Second), WithHeartbeat(time.Second))
		var runs atomic.Int32
		release := make(chan struct{})
		h := a.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				<-release
			}
			w.WriteHeader(http.StatusCreated)
		}))
		done := make(chan struct{})
		go func() { post(h, "/", "k", ""); close(done) }()
		synctest.Wait()
		if ok, err := s.Delete(t.Context(), store.Ref{Scope: Scope("", "POST", ""), Key: "k"}); err != nil || !ok {
			t.Fatalf("evicting the running claim: %v %v", ok, err)
		}
		// The eviction came from elsewhere: this engine learns it from the store.
		if w := post(h, "/", "k", ""); w.Code != http.StatusConflict {
			t.Errorf("before the next beat: %d, want 409", w.Code)
		}
		time.Sleep(1100 * time.Millisecond)
		if w := post(h, "/", "k", ""); w.Code != http.StatusCreated || runs.Load() != 2 {
			t.Errorf("after the beat found the claim gone: %d, %d runs, %d extends; want 201 and a second run", w.Code, runs.Load(), s.count("extend"))
		}
		close(release)
		<-done
	})
}
