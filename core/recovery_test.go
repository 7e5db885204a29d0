package idem

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/core/store"
)

// blipStore is a testStore whose calls fail, as a store that is down,
// while down is set for their operation. landing makes a failed Claim or
// Complete write first, as a call that timed out after its write landed.
type blipStore struct {
	*testStore
	mu      sync.Mutex
	down    map[string]bool
	landing bool
}

var errBlip = errors.New("blip: the store is down")

func newBlipStore() *blipStore {
	return &blipStore{testStore: newTestStore(), down: map[string]bool{}}
}

func (s *blipStore) set(down bool, ops ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range ops {
		s.down[op] = down
	}
}

func (s *blipStore) fails(op string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down[op]
}

func (s *blipStore) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	if s.fails("claim") {
		s.mu.Lock()
		landing := s.landing
		s.mu.Unlock()
		if landing {
			s.testStore.Claim(ctx, c)
		}
		return store.ClaimResult{}, errBlip
	}
	return s.testStore.Claim(ctx, c)
}

func (s *blipStore) Complete(ctx context.Context, h store.Hold, c store.Completion) error {
	if s.fails("complete") {
		s.mu.Lock()
		landing := s.landing
		s.mu.Unlock()
		if landing {
			s.testStore.Complete(ctx, h, c)
		}
		return errBlip
	}
	return s.testStore.Complete(ctx, h, c)
}

func (s *blipStore) Evict(ctx context.Context, h store.Hold) error {
	if s.fails("evict") {
		return errBlip
	}
	return s.testStore.Evict(ctx, h)
}

func (s *blipStore) Release(ctx context.Context, h store.Hold) error {
	if s.fails("release") {
		return errBlip
	}
	return s.testStore.Release(ctx, h)
}

func (s *blipStore) Extend(ctx context.Context, h store.Hold, now, leaseEnd time.Time) error {
	if s.fails("extend") {
		return errBlip
	}
	return s.testStore.Extend(ctx, h, now, leaseEnd)
}

// counting is a handler that counts its runs and answers 201 "run N", or
// the status in its code field.
type counting struct {
	runs atomic.Int32
	code atomic.Int32
	wait time.Duration
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	time.Sleep(c.wait)
	code := int(c.code.Load())
	if code == 0 {
		code = 201
	}
	w.WriteHeader(code)
	w.Write([]byte("run " + strconv.Itoa(int(n))))
}

func TestLeaseAndHeartbeatDefaults(t *testing.T) {
	type plain struct{ Store }
	for _, tc := range []struct {
		name  string
		store Store
		opts  []Option
		lease time.Duration
		beat  bool
	}{
		{"a store with Extender", newTestStore(), nil, 15 * time.Second, true},
		{"a store without Extender", plain{newTestStore()}, nil, 5 * time.Minute, false},
		{"heartbeat turned off", newTestStore(), []Option{WithHeartbeat(0)}, 5 * time.Minute, false},
		{"a lease of one's own", newTestStore(), []Option{WithLease(time.Minute)}, time.Minute, true},
		{"an explicit heartbeat", newTestStore(), []Option{WithHeartbeat(2 * time.Second)}, 15 * time.Second, true},
		{"a lease without Extender", plain{newTestStore()}, []Option{WithLease(time.Hour)}, time.Hour, false},
	} {
		e, err := New(tc.store, tc.opts...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if e.Lease() != tc.lease || e.cfg.beat != tc.beat {
			t.Errorf("%s: lease %v, heartbeat %v; want %v, %v", tc.name, e.Lease(), e.cfg.beat, tc.lease, tc.beat)
		}
	}
	if _, err := New(newTestStore(), WithHeartbeat(15*time.Second)); !errors.Is(err, ErrBadOption) {
		t.Errorf("a heartbeat as long as the default lease: %v, want ErrBadOption", err)
	}
}

// TestDefaultHeartbeatKeepsAnyHandler runs a handler four times longer
// than the default lease: its claim is kept by the heartbeat, duplicates
// get 409 throughout, and it runs once.
func TestDefaultHeartbeatKeepsAnyHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s)
		h := &counting{wait: time.Minute}
		mw := e.Middleware()(h)
		done := make(chan int)
		go func() { done <- post(mw, "/", "k", "").Code }()
		for range 5 {
			time.Sleep(11 * time.Second)
			if w := post(mw, "/", "k", ""); w.Code != 409 {
				t.Fatalf("during the slow handler: %d, want 409", w.Code)
			}
		}
		if code := <-done; code != 201 {
			t.Fatalf("first: %d", code)
		}
		if w := post(mw, "/", "k", ""); w.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("after: %d %q", w.Code, w.Body)
		}
		if n := h.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times", n)
		}
		// A beat every 5 s over 60 s; none for the short requests.
		if n := s.count("extend"); n < 10 || n > 12 {
			t.Errorf("%d extends over a minute with a 15 s lease, want about 12", n)
		}
	})
}

func TestRetryAfterIsAHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			name string
			opts []Option
			want string
		}{
			{"default", nil, "1"},
			{"a longer hint", []Option{WithRetryAfter(4 * time.Second)}, "4"},
			{"rounded up", []Option{WithRetryAfter(1500 * time.Millisecond)}, "2"},
			{"below a second", []Option{WithRetryAfter(time.Millisecond)}, "1"},
			{"never past the lease left", []Option{WithRetryAfter(time.Hour), WithLease(3 * time.Second), WithHeartbeat(0)}, "3"},
		} {
			e, _ := newEngine(t, newTestStore(), tc.opts...)
			mw := e.Middleware()(&counting{wait: 2 * time.Second})
			done := make(chan struct{})
			go func() { post(mw, "/", "k", ""); close(done) }()
			synctest.Wait()
			if w := post(mw, "/", "k", ""); w.Code != 409 || w.Header().Get("Retry-After") != tc.want {
				t.Errorf("%s: %d, Retry-After %q; want 409, %s", tc.name, w.Code, w.Header().Get("Retry-After"), tc.want)
			}
			<-done
		}
		// The 503 of a failing store carries the hint too.
		s := newBlipStore()
		s.set(true, "claim")
		e, _ := newEngine(t, s, WithRetryAfter(3*time.Second))
		if w := post(e.Middleware()(&counting{}), "/", "k", ""); w.Code != 503 || w.Header().Get("Retry-After") != "3" {
			t.Errorf("store failure: %d, Retry-After %q; want 503, 3", w.Code, w.Header().Get("Retry-After"))
		}
	})
}

// TestCompletionSurvivesABlip fails the store right after the handler
// ran: the client gets its response, a retry meanwhile gets 409, and once
// the store is back the record lands and the retry replays.
func TestCompletionSurvivesABlip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		e, ev := newEngine(t, s)
		h := &counting{}
		mw := e.Middleware()(h)
		s.set(true, "complete", "extend")
		if w := post(mw, "/", "k", ""); w.Code != 201 || w.Body.String() != "run 1" {
			t.Fatalf("first: %d %q, want the handler's 201", w.Code, w.Body)
		}
		time.Sleep(5 * time.Second)
		if w := post(mw, "/", "k", ""); w.Code != 409 {
			t.Fatalf("retry while the store is down: %d, want 409", w.Code)
		}
		s.set(false, "complete", "extend")
		time.Sleep(1100 * time.Millisecond) // the backoff is capped at a second
		if w := post(mw, "/", "k", ""); w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != "run 1" {
			t.Fatalf("retry after the store is back: %d %q, want the replay", w.Code, w.Body)
		}
		if n := h.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times", n)
		}
		if got := ev.outcomes(); got[len(got)-2] != OutcomeCompletedLate {
			t.Errorf("outcomes %v: no completed_late before the replay", got)
		}
		if e.bg.pending() != 0 {
			t.Errorf("%d tasks still pending", e.bg.pending())
		}
	})
}

// TestCompletionKeepsTheClaimAlive lets the store answer Extend but not
// Complete for longer than the lease: the claim stays, so no retry runs the
// handler again, and the record lands once Complete works.
func TestCompletionKeepsTheClaimAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		e, _ := newEngine(t, s)
		h := &counting{}
		mw := e.Middleware()(h)
		s.set(true, "complete")
		post(mw, "/", "k", "")
		time.Sleep(40 * time.Second) // past the 15 s lease, twice over
		if w := post(mw, "/", "k", ""); w.Code != 409 {
			t.Fatalf("retry after the lease: %d, want 409 (the claim kept alive)", w.Code)
		}
		s.set(false, "complete")
		time.Sleep(1100 * time.Millisecond)
		if w := post(mw, "/", "k", ""); w.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("after: %d %q, want the replay", w.Code, w.Body)
		}
		if n := h.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times", n)
		}
	})
}

func TestCompletionGivesUp(t *testing.T) {
	t.Run("the claim is taken over", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newBlipStore()
			e, ev := newEngine(t, s)
			h := &counting{}
			mw := e.Middleware()(h)
			s.set(true, "complete", "extend")
			post(mw, "/", "k", "")
			time.Sleep(16 * time.Second) // the lease ends while the store cannot complete
			// The same process holds the result: it answers 409.
			if w := post(mw, "/", "k", ""); w.Code != 409 {
				t.Errorf("retry on the instance that holds the pending completion: %d, want 409", w.Code)
			}
			// Another instance takes the key over.
			other, _ := newEngine(t, s)
			if w := post(other.Middleware()(h), "/", "k", ""); w.Code != 201 || w.Body.String() != "run 2" {
				t.Errorf("retry on another instance after the lease ended: %d %q, want a new run", w.Code, w.Body)
			}
			s.set(false, "complete", "extend")
			time.Sleep(2 * time.Second)
			if !hasOutcome(ev, OutcomeCompletionLost) {
				t.Errorf("outcomes %v, want completion_lost", ev.outcomes())
			}
		})
	})
	t.Run("the retry limit passes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newBlipStore()
			e, ev := newEngine(t, s, WithCompletionRetry(10*time.Second))
			mw := e.Middleware()(&counting{})
			s.set(true, "complete")
			post(mw, "/", "k", "")
			time.Sleep(12 * time.Second)
			if !hasOutcome(ev, OutcomeCompletionExpired) || e.bg.pending() != 0 {
				t.Errorf("outcomes %v, %d pending; want completion_expired", ev.outcomes(), e.bg.pending())
			}
		})
	})
	t.Run("turned off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := newBlipStore()
			e, _ := newEngine(t, s, WithCompletionRetry(0))
			s.set(true, "complete")
			post(e.Middleware()(&counting{}), "/", "k", "")
			if e.bg.pending() != 0 || s.count("complete") != 0 {
				t.Errorf("%d pending with the completion retry off", e.bg.pending())
			}
		})
	})
}

func hasOutcome(ev *events, o Outcome) bool {
	for _, x := range ev.outcomes() {
		if x == o {
			return true
		}
	}
	return false
}

// TestPendingIsBounded fills the bound on pending bytes: the oldest
// completions are dropped and reported, the newest kept.
func TestPendingIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		e, ev := newEngine(t, s, WithMaxPendingBytes(3*(taskOverhead+100)))
		mw := e.Middleware()(&counting{})
		s.set(true, "complete")
		for i := range 5 {
			post(mw, "/", "k"+strconv.Itoa(i), "")
		}
		synctest.Wait()
		if n := e.bg.pending(); n != 3 {
			t.Errorf("%d pending, want 3", n)
		}
		dropped := 0
		for _, x := range ev.outcomes() {
			if x == OutcomeCompletionDropped {
				dropped++
			}
		}
		if dropped != 2 {
			t.Errorf("outcomes %v: %d dropped, want 2", ev.outcomes(), dropped)
		}
		s.set(false, "complete")
		if err := e.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		// The dropped keys stay claimed until their lease ends.
		mw2 := e.Middleware()(&counting{})
		for i, want := range []int{409, 409, 201, 201, 201} {
			w := post(mw2, "/", "k"+strconv.Itoa(i), "")
			if replayed := w.Header().Get("Idempotent-Replayed") == "true"; w.Code != want || replayed != (want == 201) {
				t.Errorf("k%d: %d replayed=%v, want %d", i, w.Code, replayed, want)
			}
		}
	})
}

func TestCloseFinishesPendingWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		e, ev := newEngine(t, s)
		mw := e.Middleware()(&counting{})
		s.set(true, "complete")
		post(mw, "/", "k", "")
		go func() { time.Sleep(3 * time.Second); s.set(false, "complete") }()
		if err := e.Close(t.Context()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if !hasOutcome(ev, OutcomeCompletedLate) {
			t.Errorf("outcomes %v: Close returned before the completion landed", ev.outcomes())
		}

		// With a deadline that passes first, the rest are dropped.
		s.set(true, "complete")
		e2, ev2 := newEngine(t, s)
		post(e2.Middleware()(&counting{}), "/", "k2", "")
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if err := e2.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close past its deadline: %v", err)
		}
		synctest.Wait()
		if !hasOutcome(ev2, OutcomeCompletionDropped) {
			t.Errorf("outcomes %v, want completion_dropped", ev2.outcomes())
		}
		// After Close, a failed completion is not retried.
		post(e2.Middleware()(&counting{}), "/", "k3", "")
		if e2.bg.pending() != 0 {
			t.Errorf("%d pending after Close", e2.bg.pending())
		}
		if err := e2.Close(t.Context()); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

// TestOrphanReleaseIsRetried: a Claim that failed but landed, with the
// store down for a few seconds. The client is told 503; once the store is
// back its retry runs instead of getting 409 for the lease.
func TestOrphanReleaseIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		s.landing = true
		e, _ := newEngine(t, s, WithLease(time.Minute))
		h := &counting{}
		mw := e.Middleware()(h)
		s.set(true, "claim", "release")
		if w := post(mw, "/", "k", ""); w.Code != 503 {
			t.Fatalf("first: %d, want 503", w.Code)
		}
		time.Sleep(5 * time.Second)
		s.set(false, "claim", "release")
		time.Sleep(1100 * time.Millisecond)
		if w := post(mw, "/", "k", ""); w.Code != 201 {
			t.Errorf("retry once the store is back: %d %q, want a run", w.Code, w.Body)
		}
	})
}

func TestReleaseFailureIsRetriedAndReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		e, ev := newEngine(t, s, WithLease(10*time.Second), WithHeartbeat(0))
		h := &counting{}
		h.code.Store(503)
		mw := e.Middleware()(h)
		s.set(true, "release")
		post(mw, "/", "k", "")
		time.Sleep(2 * time.Second)
		s.set(false, "release")
		time.Sleep(1100 * time.Millisecond)
		h.code.Store(201)
		if w := post(mw, "/", "k", ""); w.Code != 201 {
			t.Errorf("retry after a 5xx whose release failed, store back: %d", w.Code)
		}
		if hasOutcome(ev, OutcomeReleaseFailed) {
			t.Errorf("outcomes %v: a release that landed reported as failed", ev.outcomes())
		}

		// Down past the lease: reported, and the key frees at the lease end.
		h.code.Store(503)
		s.set(true, "release")
		post(mw, "/", "k2", "")
		time.Sleep(11 * time.Second)
		if !hasOutcome(ev, OutcomeReleaseFailed) || e.bg.pending() != 0 {
			t.Errorf("outcomes %v, %d pending; want release_failed", ev.outcomes(), e.bg.pending())
		}
	})
}

func TestFailedClaimReleasesItsOrphan(t *testing.T) {
	s := &lateStore{testStore: newTestStore()}
	e, _ := newEngine(t, s)
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	if w := post(h, "/", "k", ""); w.Code != 503 {
		t.Fatalf("first: %d", w.Code)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.count("release") == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s.late.Store(false)
	if w := post(h, "/", "k", ""); w.Code != 201 {
		t.Errorf("retry after a claim whose answer was lost: %d, want 201 (the orphan released)", w.Code)
	}
}

// lateStore takes the claim but reports an error, as a timed-out call
// whose write landed.
type lateStore struct {
	*testStore
	late atomic.Bool
}

func (s *lateStore) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	res, err := s.testStore.Claim(ctx, c)
	if s.late.Load() || s.count("claim") == 1 {
		s.late.Store(true)
		return store.ClaimResult{}, context.DeadlineExceeded
	}
	return res, err
}

// TestDoBackgroundCompletionOverPendingBytes: a Do result that outgrows
// WithMaxPendingBytes while its completion waits in the background is
// kept without its value, as a Do result: the retry gets ErrResultOmitted
// and does not run fn again, even failing open.
func TestDoBackgroundCompletionOverPendingBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newBlipStore()
		e, _ := newEngine(t, s, WithMaxPendingBytes(2048), WithFailOpen())
		runs := 0
		fn := func(context.Context) ([]byte, error) { runs++; return bytes.Repeat([]byte("v"), 4096), nil }
		op := Op{Kind: "q", Name: "charge", Key: "k", Fingerprint: "f"}
		s.set(true, "complete")
		if _, _, err := e.Do(t.Context(), op, fn); err != nil {
			t.Fatal(err)
		}
		s.set(false, "complete")
		time.Sleep(time.Minute) // the background completion lands
		synctest.Wait()
		v, replayed, err := e.Do(t.Context(), op, fn)
		if !errors.Is(err, ErrResultOmitted) || !replayed || v != nil || runs != 1 {
			t.Errorf("retry: %q, replayed %v, %v, %d runs; want ErrResultOmitted and one run", v, replayed, err, runs)
		}
	})
}
