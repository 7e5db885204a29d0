package memstore_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

func TestConformance(t *testing.T) {
	conformance.RunStore(t, func(t *testing.T) idem.Store {
		s := memstore.New()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestConformanceWithoutSweeper(t *testing.T) {
	conformance.RunStore(t, func(t *testing.T) idem.Store {
		return memstore.New(memstore.WithSweepInterval(0))
	})
}

const scope = "4:acme4:POST7:/orders"

func claim(key string, now time.Time, lease time.Duration) idem.Claim {
	return idem.Claim{Scope: scope, Key: key, Fingerprint: "fp-" + key, Token: "token-" + key, Now: now, LeaseEnd: now.Add(lease)}
}

func mustAcquire(t *testing.T, s *memstore.Store, c idem.Claim) {
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
	_, ok, err := s.Get(t.Context(), scope, key, time.Unix(0, 0))
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
			name: "ClosestToExpiry",
			existing: []rec{
				{"a", 10 * time.Minute, false},
				{"b", 5 * time.Minute, false},
				{"c", time.Hour, true},
			},
			wantGone: "b",
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
			name: "ExpiredFirst",
			existing: []rec{
				{"live-completed", time.Hour, true},
				{"live-claim", 20 * time.Minute, false},
				{"abandoned", 5 * time.Minute, false},
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
					resp := idem.Response{Status: http.StatusOK}
					if err := s.Complete(t.Context(), scope, r.key, c.Token, resp, base, base.Add(r.expiresIn)); err != nil {
						t.Fatalf("Complete(%q): %v", r.key, err)
					}
				}
				ch, stop, _ := s.Watch(t.Context(), scope, r.key)
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
					t.Errorf("record %q present = %t, want %t (the record closest to expiry is %q)", r.key, !gone, !gone, tc.wantGone)
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
	// Later claims get later lease ends, so the oldest claims go first.
	for i := range 3 * max {
		mustAcquire(t, s, claim(strconv.Itoa(i), base, time.Duration(i+1)*time.Second))
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
		if err := s.Complete(t.Context(), scope, "done", "token-done", idem.Response{Status: 200}, now, now.Add(90*time.Second)); err != nil {
			t.Fatal(err)
		}
		abandoned, stop1, _ := s.Watch(t.Context(), scope, "abandoned")
		defer stop1()
		live, stop2, _ := s.Watch(t.Context(), scope, "live")
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

var sink idem.ClaimResult

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%08d", i)
	}
	return keys
}

var benchResponse = idem.Response{
	Status: http.StatusCreated,
	Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/42"}},
	Body:   []byte(`{"id":42,"status":"created"}`),
}

// BenchmarkClaim measures Claim that acquires a new key on a store at its
// default size limit, so each claim also evicts the oldest record.
func BenchmarkClaim(b *testing.B) {
	s := memstore.New(memstore.WithSweepInterval(0))
	keys := benchKeys(1 << 18)
	now := time.Now()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		now = now.Add(time.Microsecond)
		c := idem.Claim{Scope: scope, Key: keys[i&(len(keys)-1)], Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(5 * time.Minute)}
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
		c := idem.Claim{Scope: scope, Key: key, Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(5 * time.Minute)}
		res, err := s.Claim(b.Context(), c)
		if err != nil || !res.Acquired {
			b.Fatalf("Claim = %+v, %v", res, err)
		}
		if err := s.Complete(b.Context(), scope, key, "token", benchResponse, now, now.Add(24*time.Hour)); err != nil {
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
	c := idem.Claim{Scope: scope, Key: "key", Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(5 * time.Minute)}
	if _, err := s.Claim(b.Context(), c); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(b.Context(), scope, "key", "token", benchResponse, now, now.Add(24*time.Hour)); err != nil {
		b.Fatal(err)
	}
	c.Token = "retry"
	b.ReportAllocs()
	for b.Loop() {
		res, err := s.Claim(b.Context(), c)
		if err != nil || res.Existing == nil || res.Existing.State != idem.StateCompleted {
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
		c := idem.Claim{Scope: scope, Key: k, Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(5 * time.Minute)}
		if _, err := s.Claim(b.Context(), c); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(b.Context(), scope, k, "token", benchResponse, now, now.Add(24*time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			c := idem.Claim{Scope: scope, Key: keys[i&(len(keys)-1)], Fingerprint: "fp", Token: "retry", Now: now, LeaseEnd: now.Add(5 * time.Minute)}
			if res, err := s.Claim(b.Context(), c); err != nil || res.Acquired {
				b.Fatalf("Claim = %+v, %v", res, err)
			}
			i++
		}
	})
}
