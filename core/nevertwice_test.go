package idem

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// This file holds the engine's regression tests for "never twice, in every
// configuration": each fails on the engine before its fix.

// TestEvictAfterExpiryKeepsTheRetrysClaim: a response streams under a
// completed record, the record expires while the handler still runs, a
// retry claims the key, and then the first handler panics. Evicting the
// truncated record must not delete the retry's claim, or a third request
// runs beside the retry.
func TestEvictAfterExpiryKeepsTheRetrysClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s, WithMaxResponseBody(4))
		release := make(chan struct{})
		h := e.Middleware(TTL(time.Second))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.Header.Get("X-Run") {
			case "first":
				w.Write([]byte("more than four bytes: the response streams"))
				time.Sleep(2 * time.Second) // the one-second record expires meanwhile
				panic(http.ErrAbortHandler)
			case "retry":
				<-release // holds its claim while the first panics
				w.WriteHeader(201)
			default:
				w.WriteHeader(202)
			}
		}))
		send := func(run string) int {
			r := httptest.NewRequest("POST", "/", nil)
			r.Header.Set("Idempotency-Key", "k")
			r.Header.Set("X-Run", run)
			w := httptest.NewRecorder()
			func() {
				defer func() { recover() }()
				h.ServeHTTP(w, r)
			}()
			return w.Code
		}
		var wg sync.WaitGroup
		wg.Go(func() { send("first") })
		time.Sleep(1500 * time.Millisecond)
		wg.Go(func() { send("retry") })
		time.Sleep(time.Second) // the first has panicked and evicted
		synctest.Wait()
		if code := send("third"); code != http.StatusConflict {
			t.Errorf("a third request while the retry holds the key answered %d, want 409: the first request's eviction deleted the retry's claim", code)
		}
		close(release)
		wg.Wait()
	})
}

// TestLateCompletionLandsAfterTheLease: the store stalls through the
// completion for longer than the lease, and nobody takes the key over
// meanwhile: the claim is still the request's, so the background
// completion lands once the store is back (completed_late, not
// completion_lost) and the retry replays instead of running again.
func TestLateCompletionLandsAfterTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		e, ev := newEngine(t, s)
		h := &counting{}
		mw := e.Middleware()(h)
		s.set(true, "complete", "extend")
		post(mw, "/", "k", "")
		time.Sleep(16 * time.Second) // past the 15 s lease
		s.set(false, "complete", "extend")
		time.Sleep(2 * time.Second)
		if hasOutcome(ev, OutcomeCompletionLost) || !hasOutcome(ev, OutcomeCompletedLate) {
			t.Errorf("outcomes %v, want completed_late and no completion_lost", ev.outcomes())
		}
		if w := post(mw, "/", "k", ""); w.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry once the store is back: %d %q, want the replay", w.Code, w.Body)
		}
		if n := h.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}
