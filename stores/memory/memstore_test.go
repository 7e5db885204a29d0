package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	memstore "github.com/idemkit/idem/stores/memory"
)

func TestConformance(t *testing.T) {
	conformance.RunStore(t, func(t *testing.T) store.Store {
		s := memstore.New()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestConformanceWithoutSweeper(t *testing.T) {
	conformance.RunStore(t, func(t *testing.T) store.Store {
		return memstore.New(memstore.WithSweepInterval(0))
	})
}

// TestConformanceZeroStore: the zero Store is a usable store, without
// limits or sweeper, rather than a panic on the first request.
func TestConformanceZeroStore(t *testing.T) {
	conformance.RunStore(t, func(t *testing.T) store.Store { return &memstore.Store{} })
}

const scope = "4:acme4:POST7:/orders"

func claim(key string, now time.Time, lease time.Duration) store.Claim {
	return store.Claim{Scope: scope, Key: key, Fingerprint: "fp-" + key, Token: "token-" + key, Now: now, LeaseEnd: now.Add(lease)}
}

// ref names key in the tests' scope; hold names its claim with token.
func ref(key string) store.Ref { return store.Ref{Scope: scope, Key: key} }

func hold(key, token string) store.Hold { return store.Hold{Ref: ref(key), Token: token} }

// result is a small opaque result, as the engine would pass.
func result(body string) store.Result {
	return store.Result{Head: []byte{1, 200, 1, 0}, Body: []byte(body)}
}

// done is the completion of a claim with result at now, kept until
// expiresAt.
func done(res store.Result, now, expiresAt time.Time) store.Completion {
	return store.Completion{Result: res, Now: now, ExpiresAt: expiresAt}
}

func mustAcquire(t *testing.T, s *memstore.Store, c store.Claim) {
	t.Helper()
	res, err := s.Claim(t.Context(), c)
	if err != nil || !res.Acquired {
		t.Fatalf("Claim(%q) = %+v, %v; want acquired", c.Key, res, err)
	}
}

// present reports whether the store still holds key, expired or not.
func present(t *testing.T, s *memstore.Store, key string) bool {
	t.Helper()
	// A now far in the past sees every record that is still held.
	_, ok, err := s.Get(t.Context(), ref(key), time.Unix(0, 0))
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return ok
}

func TestEviction(t *testing.T) {
	base := time.Now()
	type rec struct {
		key       string
		expiresIn time.Duration // the lease, or the retention once completed
		completed bool
	}
	tests := []struct {
		name      string
		existing  []rec
		claimAt   time.Duration
		wantGone  string
		wantAfter int
	}{
		{
			// The live claims expire first, but only a completed record
			// may go.
			name: "CompletedBeforeLiveClaims",
			existing: []rec{
				{"a", 10 * time.Minute, false},
				{"b", 5 * time.Minute, false},
				{"c", time.Hour, true},
			},
			wantGone: "c",
		},
		{
			name: "CompletedClosestToExpiry",
			existing: []rec{
				{"a", 10 * time.Minute, false},
				{"b", 2 * time.Minute, true},
				{"c", time.Hour, true},
			},
			wantGone: "b",
		},
		{
			name: "AbandonedClaimBeforeLiveCompleted",
			existing: []rec{
				{"live-completed", 11 * time.Minute, true},
				{"live-claim", 20 * time.Minute, false},
				{"abandoned", 5 * time.Minute, false},
			},
			claimAt:  10 * time.Minute,
			wantGone: "abandoned",
		},
		{
			name: "ExpiredCompletedBeforeLiveCompleted",
			existing: []rec{
				{"live-completed", 11 * time.Minute, true},
				{"live-claim", 12 * time.Minute, false},
				{"expired-completed", 5 * time.Minute, true},
			},
			claimAt:  10 * time.Minute,
			wantGone: "expired-completed",
		},
		{
			name: "ExpiredAtClaimTime",
			existing: []rec{
				{"live-completed", time.Hour, true},
				{"abandoned", 10 * time.Minute, false},
			},
			claimAt:  10 * time.Minute, // exactly at the lease end
			wantGone: "abandoned",
		},
		{
			name: "FirstExpiredCompleted",
			existing: []rec{
				{"live-completed", time.Hour, true},
				{"abandoned", 5 * time.Minute, false},
				{"expired-completed", 3 * time.Minute, true},
			},
			claimAt:  10 * time.Minute,
			wantGone: "expired-completed",
		},
		{
			name: "FirstExpiredClaim",
			existing: []rec{
				{"live-completed", time.Hour, true},
				{"abandoned", 3 * time.Minute, false},
				{"expired-completed", 5 * time.Minute, true},
			},
			claimAt:  10 * time.Minute,
			wantGone: "abandoned",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := memstore.New(memstore.WithMaxEntries(len(tc.existing)), memstore.WithSweepInterval(0))
			watches := map[string]<-chan struct{}{}
			for _, r := range tc.existing {
				c := claim(r.key, base, r.expiresIn)
				if r.completed {
					c.LeaseEnd = base.Add(time.Minute)
				}
				mustAcquire(t, s, c)
				if r.completed {
					if err := s.Complete(t.Context(), c.Hold(), done(result(""), base, base.Add(r.expiresIn))); err != nil {
						t.Fatalf("Complete(%q): %v", r.key, err)
					}
				}
				ch, stop, _ := s.Watch(t.Context(), ref(r.key))
				t.Cleanup(stop)
				watches[r.key] = ch
			}
			mustAcquire(t, s, claim("new", base.Add(tc.claimAt), time.Hour))
			if got, want := s.Len(), len(tc.existing); got != want {
				t.Errorf("Len() = %d after a claim on a full store, want %d", got, want)
			}
			for _, r := range tc.existing {
				gone := r.key == tc.wantGone
				if present(t, s, r.key) == gone {
					t.Errorf("record %q present = %t, want %t (the record to evict is %q)", r.key, gone, !gone, tc.wantGone)
				}
				select {
				case <-watches[r.key]:
					if !gone {
						t.Errorf("watch on %q fired, but its record was not evicted", r.key)
					}
				default:
					if gone {
						t.Errorf("watch on %q did not fire when its record was evicted", r.key)
					}
				}
			}
			if !present(t, s, "new") {
				t.Error("the new claim's record is missing")
			}
		})
	}
}

func TestEvictionKeepsMaxEntries(t *testing.T) {
	const max = 100
	s := memstore.New(memstore.WithMaxEntries(max), memstore.WithSweepInterval(0))
	base := time.Now()
	// Later records expire later, so the oldest records go first.
	for i := range 3 * max {
		c := claim(strconv.Itoa(i), base, time.Minute)
		mustAcquire(t, s, c)
		if err := s.Complete(t.Context(), c.Hold(), done(result(""), base, base.Add(time.Duration(i+1)*time.Second))); err != nil {
			t.Fatal(err)
		}
		if n := s.Len(); n > max {
			t.Fatalf("Len() = %d after %d claims, want at most %d", n, i+1, max)
		}
	}
	for i := range 3 * max {
		if want := i >= 2*max; present(t, s, strconv.Itoa(i)) != want {
			t.Errorf("record %d present = %t, want %t", i, !want, want)
		}
	}
}

// mustBeFull checks that a claim on key at now fails with ErrFull and
// changes nothing.
func mustBeFull(t *testing.T, s *memstore.Store, key string, now time.Time) {
	t.Helper()
	before := s.Len()
	res, err := s.Claim(t.Context(), claim(key, now, 5*time.Minute))
	if !errors.Is(err, memstore.ErrFull) || res.Acquired || res.Existing != nil {
		t.Fatalf("Claim(%q) on a store full of live claims = %+v, %v; want ErrFull", key, res, err)
	}
	if n := s.Len(); n != before {
		t.Fatalf("Len() = %d after a refused claim, want %d", n, before)
	}
	if present(t, s, key) {
		t.Fatalf("a refused claim stored %q", key)
	}
}

// TestEvictionNeverTakesLiveClaim fills a store with live claims and
// completed records and claims new keys: the completed records go, oldest
// expiry first; then, with only live claims left, claims fail with ErrFull
// until a claim completes, is released or reaches its lease end.
func TestEvictionNeverTakesLiveClaim(t *testing.T) {
	s := memstore.New(memstore.WithMaxEntries(4), memstore.WithSweepInterval(0))
	base := time.Now()
	// r1 and r2 are running; their leases end long before c1 and c2 expire.
	mustAcquire(t, s, claim("r1", base, 10*time.Minute))
	mustAcquire(t, s, claim("r2", base, 3*time.Minute))
	for key, retention := range map[string]time.Duration{"c1": time.Hour, "c2": 24 * time.Hour} {
		c := claim(key, base, time.Minute)
		mustAcquire(t, s, c)
		if err := s.Complete(t.Context(), c.Hold(), done(result(""), base, base.Add(retention))); err != nil {
			t.Fatal(err)
		}
	}
	watches := map[string]<-chan struct{}{}
	for _, key := range []string{"r1", "r2", "c1", "c2"} {
		ch, stop, _ := s.Watch(t.Context(), ref(key))
		t.Cleanup(stop)
		watches[key] = ch
	}
	fired := func(key string) bool {
		select {
		case <-watches[key]:
			return true
		default:
			return false
		}
	}
	expect := func(step string, want ...string) {
		t.Helper()
		if n := s.Len(); n != len(want) {
			t.Errorf("%s: Len() = %d, want %d", step, n, len(want))
		}
		for _, key := range want {
			if !present(t, s, key) {
				t.Errorf("%s: record %q is gone", step, key)
			}
		}
	}

	now := base.Add(time.Second)
	mustAcquire(t, s, claim("n1", now, 10*time.Minute))
	if present(t, s, "c1") || !fired("c1") {
		t.Error("the completed record closest to expiry (c1) was not evicted first")
	}
	mustAcquire(t, s, claim("n2", now, 10*time.Minute))
	if present(t, s, "c2") || !fired("c2") {
		t.Error("the last completed record (c2) was not evicted")
	}
	expect("after evicting both completed records", "r1", "r2", "n1", "n2")

	// Only live claims are left: a new key is refused, the claims stay,
	// and a duplicate of a running request still sees its claim.
	mustBeFull(t, s, "n3", now)
	expect("after ErrFull", "r1", "r2", "n1", "n2")
	if fired("r1") || fired("r2") {
		t.Error("a refused claim woke the watchers of a live claim")
	}
	dup := claim("r1", now, 5*time.Minute)
	dup.Token = "duplicate"
	res, err := s.Claim(t.Context(), dup)
	if err != nil || res.Acquired || res.Existing == nil || res.Existing.State != store.InProgress {
		t.Fatalf("duplicate of the running r1 on a full store: Claim = %+v, %v; want the in-progress record", res, err)
	}

	// A claim that completes becomes evictable.
	if err := s.Complete(t.Context(), hold("r1", "token-r1"), done(result(""), now, now.Add(24*time.Hour))); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, claim("n3", now, 10*time.Minute))
	if present(t, s, "r1") || !fired("r1") {
		t.Error("r1, completed, was not evicted for n3")
	}
	expect("after r1 completed", "r2", "n1", "n2", "n3")
	mustBeFull(t, s, "n4", now)

	// A released claim leaves room.
	if err := s.Release(t.Context(), hold("n3", "token-n3")); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, claim("n4", now, 10*time.Minute))
	expect("after n3 was released", "r2", "n1", "n2", "n4")

	// r2's lease ends at base+3m: before, it is live; from then on, it is
	// an abandoned claim and may go.
	mustBeFull(t, s, "n5", base.Add(3*time.Minute-time.Nanosecond))
	if fired("r2") {
		t.Error("r2 was evicted while its lease ran")
	}
	mustAcquire(t, s, claim("n5", base.Add(3*time.Minute), 10*time.Minute))
	if present(t, s, "r2") || !fired("r2") {
		t.Error("r2, abandoned, was not evicted for n5")
	}
	expect("after r2's lease ended", "n1", "n2", "n4", "n5")
}

// TestFullStoreNoDoubleExecution is the scenario that once ran a request
// twice: with room for two records and two requests running, a third key
// evicted the first request's claim, and a duplicate of the first request
// then acquired its key while it was still running.
func TestFullStoreNoDoubleExecution(t *testing.T) {
	s := memstore.New(memstore.WithMaxEntries(2), memstore.WithSweepInterval(0))
	now := time.Now()
	mustAcquire(t, s, claim("a", now, 5*time.Minute))
	mustAcquire(t, s, claim("b", now, 5*time.Minute))
	mustBeFull(t, s, "c", now)
	dup := claim("a", now.Add(time.Second), 5*time.Minute)
	dup.Token = "duplicate"
	res, err := s.Claim(t.Context(), dup)
	if err != nil || res.Acquired {
		t.Fatalf("duplicate of the running request: Claim = %+v, %v; want the existing claim (a second execution otherwise)", res, err)
	}
	if res.Existing == nil || res.Existing.State != store.InProgress || res.Existing.Fingerprint != "fp-a" {
		t.Fatalf("duplicate of the running request: Existing = %+v, want a's in-progress record", res.Existing)
	}
}

// TestFullStoreThroughEngine runs the same scenario through the engine:
// the third key gets a 503, the duplicate a 409, and the first request's
// handler runs once.
func TestFullStoreThroughEngine(t *testing.T) {
	s := memstore.New(memstore.WithMaxEntries(2), memstore.WithSweepInterval(0))
	var (
		mu     sync.Mutex
		events []idem.Event
	)
	e, err := idem.New(s, idem.WithObserver(func(_ context.Context, ev idem.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	}))
	if err != nil {
		t.Fatal(err)
	}
	var runs [3]atomic.Int32 // by key: a, b, c
	started := make(chan struct{})
	unblock := make(chan struct{})
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		// The first runs of a and b block until the end of the test;
		// anything else (a bug) answers at once, so the test fails rather
		// than hangs.
		if runs[key[0]-'a'].Add(1) == 1 && key != "c" {
			started <- struct{}{}
			<-unblock
		}
		w.WriteHeader(http.StatusCreated)
	}))
	do := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"key":"`+key+`"}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	var wg sync.WaitGroup
	for _, key := range []string{"a", "b"} {
		wg.Go(func() {
			if w := do(key); w.Code != http.StatusCreated {
				t.Errorf("request %q: %d %s, want 201", key, w.Code, w.Body)
			}
		})
		<-started
	}
	if w := do("c"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("request c on a store full of running requests: %d %s, want 503", w.Code, w.Body)
	}
	if w := do("a"); w.Code != http.StatusConflict {
		t.Errorf("duplicate of the running request a: %d %s, want 409", w.Code, w.Body)
	}
	close(unblock)
	wg.Wait()
	for i, want := range []int32{1, 1, 0} {
		if n := runs[i].Load(); n != want {
			t.Errorf("handler ran %d times for key %c, want %d", n, 'a'+i, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var full bool
	for _, ev := range events {
		if ev.Outcome == idem.OutcomeStoreFailure && errors.Is(ev.Err, memstore.ErrFull) {
			full = true
		}
	}
	if !full {
		t.Errorf("no store_failure event carries ErrFull; events: %+v", events)
	}
}

func TestUnlimited(t *testing.T) {
	s := memstore.New(memstore.WithMaxEntries(0), memstore.WithSweepInterval(0))
	base := time.Now()
	for i := range 1000 {
		mustAcquire(t, s, claim(strconv.Itoa(i), base, time.Minute))
	}
	if n := s.Len(); n != 1000 {
		t.Fatalf("Len() = %d with no limit, want 1000", n)
	}
}

func TestSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.WithSweepInterval(time.Minute))
		defer s.Close()
		now := time.Now() // the bubble's fake clock
		mustAcquire(t, s, claim("abandoned", now, 30*time.Second))
		mustAcquire(t, s, claim("live", now, 5*time.Minute))
		mustAcquire(t, s, claim("done", now, time.Minute))
		if err := s.Complete(t.Context(), hold("done", "token-done"), done(result(""), now, now.Add(90*time.Second))); err != nil {
			t.Fatal(err)
		}
		abandoned, stop1, _ := s.Watch(t.Context(), ref("abandoned"))
		defer stop1()
		live, stop2, _ := s.Watch(t.Context(), ref("live"))
		defer stop2()

		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		if present(t, s, "abandoned") {
			t.Error("the abandoned claim (lease ended at 30s) is still held after the sweep at 1m")
		}
		if !present(t, s, "done") || !present(t, s, "live") {
			t.Error("the sweep at 1m removed a record that had not expired")
		}
		select {
		case <-abandoned:
		default:
			t.Error("the watch on the swept record did not fire")
		}

		time.Sleep(time.Minute)
		synctest.Wait()
		if present(t, s, "done") {
			t.Error("the completed record (expired at 90s) is still held after the sweep at 2m")
		}
		if n := s.Len(); n != 1 {
			t.Errorf("Len() = %d after the sweep at 2m, want 1 (the live claim)", n)
		}
		select {
		case <-live:
			t.Error("the watch on the live claim fired, but nothing happened to it")
		default:
		}
	})
}

// TestSweepWithClock checks that the sweeper reads the clock WithClock
// gives it rather than the wall clock, for records of both states.
func TestSweepWithClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The engine's clock runs a year behind the bubble's wall clock and
		// only moves when the test moves it.
		var offset atomic.Int64
		start := time.Now().AddDate(-1, 0, 0)
		clock := func() time.Time { return start.Add(time.Duration(offset.Load())) }
		s := memstore.New(memstore.WithSweepInterval(time.Minute), memstore.WithClock(clock))
		defer s.Close()
		now := clock()
		mustAcquire(t, s, claim("abandoned", now, 30*time.Second))
		mustAcquire(t, s, claim("live", now, time.Hour))
		mustAcquire(t, s, claim("done", now, time.Minute))
		if err := s.Complete(t.Context(), hold("done", "token-done"), done(result(""), now, now.Add(90*time.Second))); err != nil {
			t.Fatal(err)
		}
		abandoned, stop1, _ := s.Watch(t.Context(), ref("abandoned"))
		defer stop1()
		swept, stop2, _ := s.Watch(t.Context(), ref("done"))
		defer stop2()

		// Every record has expired by the wall clock; none by the store's.
		time.Sleep(10*time.Minute + time.Second)
		synctest.Wait()
		if n := s.Len(); n != 3 {
			t.Fatalf("Len() = %d with the store's clock standing still, want 3: the sweeper read the wall clock", n)
		}

		offset.Store(int64(time.Minute)) // past the abandoned claim's lease
		time.Sleep(time.Minute)
		synctest.Wait()
		if present(t, s, "abandoned") {
			t.Error("the abandoned claim is still held after a sweep past its lease end")
		}
		select {
		case <-abandoned:
		default:
			t.Error("the watch on the swept claim did not fire")
		}
		if !present(t, s, "done") || !present(t, s, "live") {
			t.Error("the sweep removed a record that had not expired by the store's clock")
		}

		offset.Store(int64(2 * time.Minute)) // past the completed record's expiry
		time.Sleep(time.Minute)
		synctest.Wait()
		if present(t, s, "done") {
			t.Error("the completed record is still held after a sweep past its expiry")
		}
		select {
		case <-swept:
		default:
			t.Error("the watch on the swept completed record did not fire")
		}
		if n := s.Len(); n != 1 || !present(t, s, "live") {
			t.Errorf("Len() = %d after the sweeps, want 1 (the live claim)", n)
		}
	})
}

func TestCloseStopsSweeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.WithSweepInterval(time.Minute))
		mustAcquire(t, s, claim("abandoned", time.Now(), time.Second))
		s.Close()
		s.Close() // idempotent
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if !present(t, s, "abandoned") {
			t.Error("the expired record was swept after Close; the sweeper should have stopped")
		}
		// The store keeps working after Close.
		if n, err := s.DeleteExpired(t.Context(), time.Now()); n != 1 || err != nil {
			t.Errorf("DeleteExpired after Close = %d, %v; want 1, nil", n, err)
		}
		// synctest.Test returns only once every goroutine it started has
		// exited, the sweeper included.
	})
}

func TestCanceledContext(t *testing.T) {
	s := memstore.New(memstore.WithSweepInterval(0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Claim(ctx, claim("k", time.Now(), time.Minute)); err == nil {
		t.Error("Claim with a canceled context succeeded, want the context's error")
	}
	if s.Len() != 0 {
		t.Error("Claim with a canceled context stored a record")
	}
}

var sink store.ClaimResult

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%08d", i)
	}
	return keys
}

// benchResult is about what the engine stores for a 201 with a
// Content-Type and a Location.
var benchResult = store.Result{
	Head: []byte("\x01\xc9\x01\x01\x02\x0cContent-Type\x01\x10application/json\x08Location\x01\x0a/orders/42"),
	Body: []byte(`{"id":42,"status":"created"}`),
}

// BenchmarkClaim measures Claim that acquires a new key on a store at its
// default size limit, so each claim also evicts the oldest record: an
// abandoned claim, since a live one is never evicted. The clock moves 1µs a
// claim and a lease lasts 50ms, so the oldest of the DefaultMaxEntries
// claims held ended its lease about 50ms before.
func BenchmarkClaim(b *testing.B) {
	s := memstore.New(memstore.WithSweepInterval(0))
	keys := benchKeys(1 << 18)
	now := time.Now()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		c := store.Claim{Scope: scope, Key: keys[i&(len(keys)-1)], Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(50 * time.Millisecond)}
		res, err := s.Claim(b.Context(), c)
		if err != nil || !res.Acquired {
			b.Fatalf("Claim = %+v, %v", res, err)
		}
		i++
	}
}

// BenchmarkClaimComplete measures the path of a first request: Claim that
// acquires, then Complete.
func BenchmarkClaimComplete(b *testing.B) {
	s := memstore.New(memstore.WithSweepInterval(0))
	keys := benchKeys(1 << 18)
	now := time.Now()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		key := keys[i&(len(keys)-1)]
		c := store.Claim{Scope: scope, Key: key, Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(5 * time.Minute)}
		res, err := s.Claim(b.Context(), c)
		if err != nil || !res.Acquired {
			b.Fatalf("Claim = %+v, %v", res, err)
		}
		if err := s.Complete(b.Context(), c.Hold(), done(benchResult, now, now.Add(24*time.Hour))); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkClaimReplay measures the path of a retry: Claim that returns the
// completed record.
func BenchmarkClaimReplay(b *testing.B) {
	s := memstore.New(memstore.WithSweepInterval(0))
	now := time.Now()
	c := store.Claim{Scope: scope, Key: "key", Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(5 * time.Minute)}
	if _, err := s.Claim(b.Context(), c); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(b.Context(), c.Hold(), done(benchResult, now, now.Add(24*time.Hour))); err != nil {
		b.Fatal(err)
	}
	c.Token = "retry"
	b.ReportAllocs()
	for b.Loop() {
		res, err := s.Claim(b.Context(), c)
		if err != nil || res.Existing == nil || res.Existing.State != store.Completed {
			b.Fatalf("Claim = %+v, %v", res, err)
		}
		sink = res
	}
}

// BenchmarkClaimReplayParallel measures retries of many keys from every P,
// to show the cost of the single lock.
func BenchmarkClaimReplayParallel(b *testing.B) {
	s := memstore.New(memstore.WithSweepInterval(0))
	keys := benchKeys(1024)
	now := time.Now()
	for _, k := range keys {
		c := store.Claim{Scope: scope, Key: k, Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(5 * time.Minute)}
		if _, err := s.Claim(b.Context(), c); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(b.Context(), c.Hold(), done(benchResult, now, now.Add(24*time.Hour))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			c := store.Claim{Scope: scope, Key: keys[i&(len(keys)-1)], Fingerprint: "fp", Token: "retry", Now: now, LeaseEnd: now.Add(5 * time.Minute)}
			if res, err := s.Claim(b.Context(), c); err != nil || res.Acquired {
				b.Fatalf("Claim = %+v, %v", res, err)
			}
			i++
		}
	})
}

// TestBadOptions checks that every option refuses a negative value where
// it is given, with a panic whose error wraps idem.ErrBadOption and names
// the option, and that zero (no limit, no sweeper) is accepted.
func TestBadOptions(t *testing.T) {
	for name, opt := range map[string]func(){
		"max entries":    func() { memstore.WithMaxEntries(-1) },
		"max bytes":      func() { memstore.WithMaxBytes(-1) },
		"sweep interval": func() { memstore.WithSweepInterval(-time.Second) },
	} {
		func() {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, memstore.ErrBadOption) || !errors.Is(err, idem.ErrBadOption) || !strings.Contains(err.Error(), name) {
					t.Errorf("%s: panic %v, want an error wrapping memstore.ErrBadOption and idem.ErrBadOption that names it", name, err)
				}
			}()
			opt()
		}()
	}
	s := memstore.New(memstore.WithMaxEntries(0), memstore.WithMaxBytes(0), memstore.WithSweepInterval(0))
	s.Close()
}

// TestLateCompleteUnderBytePressure: a completion that comes after its
// lease ended (nobody took the key over) and needs room evicts other
// records, never its own claim: the record lands, and a retry replays it.
func TestLateCompleteUnderBytePressure(t *testing.T) {
	s := memstore.New(memstore.WithMaxBytes(100), memstore.WithSweepInterval(0))
	defer s.Close()
	ctx := t.Context()
	t0 := time.Unix(1_000_000, 0)
	a := store.Claim{Scope: "s", Key: "a", Fingerprint: "fa", Token: "ta", Now: t0, LeaseEnd: t0.Add(time.Second)}
	b := store.Claim{Scope: "s", Key: "b", Fingerprint: "fb", Token: "tb", Now: t0, LeaseEnd: t0.Add(time.Second)}
	for _, c := range []store.Claim{a, b} {
		if r, err := s.Claim(ctx, c); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
	}
	res := store.Result{Head: []byte{1}, Body: make([]byte, 59)}
	if err := s.Complete(ctx, b.Hold(), store.Completion{Result: res, Now: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	late := t0.Add(2 * time.Second)
	if err := s.Complete(ctx, a.Hold(), store.Completion{Result: res, Now: late, ExpiresAt: late.Add(time.Hour)}); err != nil {
		t.Fatalf("late complete: %v", err)
	}
	retry := a
	retry.Token, retry.Now, retry.LeaseEnd = "ta2", late, late.Add(time.Second)
	if r, err := s.Claim(ctx, retry); err != nil || r.Acquired || r.Existing.State != store.Completed {
		t.Fatalf("retry after the late completion: %+v %v, want the completed record", r, err)
	}
	if s.Bytes() > 100 {
		t.Errorf("%d bytes held, over 100", s.Bytes())
	}
}
