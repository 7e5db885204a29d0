package memstore_test

import (
	"bytes"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

func body(n int) idem.Response {
	return idem.Response{Status: 201, Body: bytes.Repeat([]byte("x"), n)}
}

func complete(t *testing.T, s *memstore.Store, key string, resp idem.Response, now time.Time, retention time.Duration) {
	t.Helper()
	mustAcquire(t, s, claim(key, now, time.Minute))
	if err := s.Complete(t.Context(), scope, key, "token-"+key, resp, now, now.Add(retention)); err != nil {
		t.Fatalf("Complete(%q): %v", key, err)
	}
}

func TestByteBudget(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	t.Run("evicts the completed record closest to expiry", func(t *testing.T) {
		s := memstore.New(memstore.WithMaxBytes(3000), memstore.WithSweepInterval(0))
		complete(t, s, "late", body(1000), now, 3*time.Hour)
		complete(t, s, "soon", body(1000), now, time.Hour)
		complete(t, s, "mid", body(1000), now, 2*time.Hour)
		if s.Bytes() != 3000 {
			t.Fatalf("Bytes %d, want 3000", s.Bytes())
		}
		complete(t, s, "new", body(1000), now, 4*time.Hour)
		for key, want := range map[string]bool{"soon": false, "mid": true, "late": true, "new": true} {
			if present(t, s, key) != want {
				t.Errorf("%s present %v, want %v", key, !want, want)
			}
		}
		if s.Bytes() != 3000 {
			t.Errorf("Bytes %d after evicting, want 3000", s.Bytes())
		}
	})
	t.Run("expired records go first", func(t *testing.T) {
		s := memstore.New(memstore.WithMaxBytes(2000), memstore.WithSweepInterval(0))
		complete(t, s, "kept", body(1000), now, time.Hour)
		complete(t, s, "expired", body(1000), now.Add(-2*time.Hour), 90*time.Minute)
		complete(t, s, "new", body(1000), now, time.Hour)
		if present(t, s, "expired") || !present(t, s, "kept") || !present(t, s, "new") {
			t.Error("the expired record was not the one evicted")
		}
	})
	t.Run("a live claim is never evicted, and holds no bytes", func(t *testing.T) {
		s := memstore.New(memstore.WithMaxBytes(1000), memstore.WithSweepInterval(0))
		for i := range 50 {
			mustAcquire(t, s, claim("running-"+strconv.Itoa(i), now, time.Hour))
		}
		complete(t, s, "a", body(800), now, time.Hour)
		complete(t, s, "b", body(800), now, 2*time.Hour)
		if s.Len() != 51 || !present(t, s, "running-7") || present(t, s, "a") {
			t.Errorf("Len %d: want the 50 claims and b", s.Len())
		}
	})
	t.Run("a response larger than the budget is stored without its body", func(t *testing.T) {
		s := memstore.New(memstore.WithMaxBytes(1000), memstore.WithSweepInterval(0))
		complete(t, s, "small", body(500), now, time.Hour)
		big := body(5000)
		big.Header = http.Header{"Content-Type": {"text/plain"}, "Content-Encoding": {"gzip"}, "Etag": {`"v1"`}}
		complete(t, s, "big", big, now, time.Hour)
		rec, ok, _ := s.Get(t.Context(), scope, "big", now)
		if !ok || !rec.Response.BodyOmitted || len(rec.Response.Body) != 0 || rec.Response.Status != 201 {
			t.Fatalf("big: %+v", rec.Response)
		}
		if h := rec.Response.Header; h.Get("Content-Type") != "text/plain" || h.Get("Content-Encoding") != "" || h.Get("Etag") != "" {
			t.Errorf("big's headers %v: want those that describe the body gone", h)
		}
		if !present(t, s, "small") {
			t.Error("an oversize response evicted what fits")
		}
	})
	t.Run("every way out gives the bytes back", func(t *testing.T) {
		s := memstore.New(memstore.WithMaxBytes(1<<20), memstore.WithSweepInterval(0))
		complete(t, s, "deleted", body(100), now, time.Hour)
		complete(t, s, "expired", body(200), now, 2*time.Hour)
		complete(t, s, "taken", body(300), now, 2*time.Hour)
		s.Delete(t.Context(), scope, "deleted")
		if n, _ := s.DeleteExpired(t.Context(), now.Add(2*time.Hour).Add(-time.Nanosecond)); n != 0 {
			t.Fatalf("DeleteExpired removed %d before expiry", n)
		}
		if s.Bytes() != 500 {
			t.Fatalf("Bytes %d after a delete, want 500", s.Bytes())
		}
		mustAcquire(t, s, claim("taken", now.Add(2*time.Hour), time.Minute)) // takes over the expired record
		s.DeleteExpired(t.Context(), now.Add(2*time.Hour))
		if s.Bytes() != 0 {
			t.Errorf("Bytes %d, want 0", s.Bytes())
		}
		h := idem.Response{Status: 200, Header: http.Header{"X-A": {"12345"}}}
		complete(t, s, "header", h, now, time.Hour)
		if s.Bytes() != int64(len("X-A")+5) {
			t.Errorf("Bytes %d, want the header's 8", s.Bytes())
		}
	})
	t.Run("no limit", func(t *testing.T) {
		s := memstore.New(memstore.WithMaxBytes(0), memstore.WithSweepInterval(0))
		for i := range 10 {
			complete(t, s, strconv.Itoa(i), body(1<<20), now, time.Hour)
		}
		if s.Len() != 10 || s.Bytes() != 10<<20 {
			t.Errorf("Len %d Bytes %d", s.Len(), s.Bytes())
		}
	})
}

// TestByteBudgetFlood stores 120,000 responses of 64 KiB (7.5 GiB in all)
// with the default budget: the heap stays within the budget plus the
// store's per-record overhead. The peak RSS of a whole process is checked
// by examples/e2e (TestMemoryFlood).
func TestByteBudgetFlood(t *testing.T) {
	s := memstore.New(memstore.WithSweepInterval(0))
	resp := body(64 << 10)
	resp.Header = http.Header{"Content-Type": {"application/json"}}
	now := time.Unix(1_800_000_000, 0)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 120_000 {
		k := strconv.Itoa(i)
		c := idem.Claim{Scope: scope, Key: k, Fingerprint: "fp", Token: "t", Now: now, LeaseEnd: now.Add(time.Minute)}
		if _, err := s.Claim(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(t.Context(), scope, k, "t", resp, now, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	const overhead = 16 << 20
	t.Logf("%d records kept, %d MiB of responses, heap grew %d MiB", s.Len(), s.Bytes()>>20, grown>>20)
	if s.Bytes() > memstore.DefaultMaxBytes {
		t.Errorf("Bytes %d over the budget %d", s.Bytes(), memstore.DefaultMaxBytes)
	}
	if grown > memstore.DefaultMaxBytes+overhead {
		t.Errorf("heap grew %d MiB, over the %d MiB budget plus %d MiB", grown>>20, memstore.DefaultMaxBytes>>20, overhead>>20)
	}
	runtime.KeepAlive(s)
}
