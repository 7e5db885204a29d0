package memstore_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	memstore "github.com/idemkit/idem/stores/memory"
)

// body returns a result that counts n bytes against the budget: a head of
// one byte and n-1 bytes of body.
func body(n int) store.Result {
	return store.Result{Head: []byte{1}, Body: bytes.Repeat([]byte("x"), n-1)}
}

func complete(t *testing.T, s *memstore.Store, key string, res store.Result, now time.Time, retention time.Duration) {
	t.Helper()
	mustAcquire(t, s, claim(key, now, time.Minute))
	if err := s.Complete(t.Context(), hold(key, "token-"+key), done(res, now, now.Add(retention))); err != nil {
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
	t.Run("a result larger than the budget is stored without its body", func(t *testing.T) {
		s := memstore.New(memstore.WithMaxBytes(1000), memstore.WithSweepInterval(0))
		complete(t, s, "small", body(500), now, time.Hour)
		head := []byte("\x01\xc9\x01 opaque head \x00\xff")
		big := store.Result{Head: head, Body: bytes.Repeat([]byte("y"), 5000)}
		complete(t, s, "big", big, now, time.Hour)
		rec, ok, _ := s.Get(t.Context(), ref("big"), now)
		if !ok || !rec.Result.BodyOmitted || len(rec.Result.Body) != 0 || !bytes.Equal(rec.Result.Head, head) {
			t.Fatalf("big: %+v, want its head kept, no body, BodyOmitted", rec.Result)
		}
		if s.Bytes() != int64(500+len(head)) {
			t.Errorf("Bytes %d, want the small record's 500 and the big one's head", s.Bytes())
		}
		if !present(t, s, "small") {
			t.Error("an oversize result evicted what fits")
		}
		// The head alone over the budget is kept too: the store keeps
		// every Head.
		tiny := memstore.New(memstore.WithMaxBytes(4), memstore.WithSweepInterval(0))
		complete(t, tiny, "head", store.Result{Head: head, Body: []byte("b")}, now, time.Hour)
		if rec, ok, _ := tiny.Get(t.Context(), ref("head"), now); !ok || !bytes.Equal(rec.Result.Head, head) || !rec.Result.BodyOmitted {
			t.Errorf("a head over the whole budget: %+v, want it kept without the body", rec.Result)
		}
	})
	t.Run("every way out gives the bytes back", func(t *testing.T) {
		s := memstore.New(memstore.WithMaxBytes(1<<20), memstore.WithSweepInterval(0))
		complete(t, s, "deleted", body(100), now, time.Hour)
		complete(t, s, "expired", body(200), now, 2*time.Hour)
		complete(t, s, "taken", body(300), now, 2*time.Hour)
		s.Delete(t.Context(), ref("deleted"))
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
		complete(t, s, "head", store.Result{Head: []byte("12345678")}, now, time.Hour)
		if s.Bytes() != 8 {
			t.Errorf("Bytes %d, want the head's 8", s.Bytes())
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
	res := body(64 << 10)
	res.Head = []byte("\x01\xc8\x01\x01\x01\x0cContent-Type\x01\x10application/json")
	now := time.Unix(1_800_000_000, 0)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 120_000 {
		k := strconv.Itoa(i)
		c := store.Claim{Scope: scope, Key: k, Fingerprint: "fp", Token: "t", Now: now, LeaseEnd: now.Add(time.Minute)}
		if _, err := s.Claim(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(t.Context(), c.Hold(), done(res, now, now.Add(time.Hour))); err != nil {
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

// TestByteBudgetThroughEngine: a response over the byte budget replays,
// through the engine, with its status and the headers that do not describe
// the body, marked as omitted; what fits replays in full.
func TestByteBudgetThroughEngine(t *testing.T) {
	s := memstore.New(memstore.WithMaxBytes(1000), memstore.WithSweepInterval(0))
	e, err := idem.New(s, idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		b, _ := io.ReadAll(r.Body)
		n, _ := strconv.Atoi(string(b))
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Encoding", "identity")
		w.Header().Set("Etag", `"v1"`)
		w.Header().Set("X-Kept", "yes")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(bytes.Repeat([]byte("z"), n))
	}))
	post := func(key, n string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(n))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := post("big", "5000"); w.Code != 201 || w.Body.Len() != 5000 {
		t.Fatalf("first big request: %d, %d bytes; want 201 and the whole body", w.Code, w.Body.Len())
	}
	w := post("big", "5000")
	if w.Code != 201 || w.Body.Len() != 0 || w.Header().Get(idem.HeaderBodyOmitted) != "true" ||
		w.Header().Get("Idempotent-Replayed") != "true" || w.Header().Get("X-Kept") != "yes" ||
		w.Header().Get("Content-Type") != "text/plain" {
		t.Errorf("replay of a response over the budget: %d, %d bytes, %v; want 201 without its body, %s, X-Kept and Content-Type kept",
			w.Code, w.Body.Len(), w.Header(), idem.HeaderBodyOmitted)
	}
	if w.Header().Get("Content-Encoding") != "" || w.Header().Get("Etag") != "" {
		// The store keeps the Head as the engine encoded it, with the
		// body's headers; the engine drops them when it decodes a result
		// whose body a store omitted (as WithoutBody does).
		t.Errorf("the replay of a body the store omitted carries the body's own headers: %v", w.Header())
	}
	post("small", "10")
	if w := post("small", "10"); w.Code != 201 || w.Body.String() != "zzzzzzzzzz" || w.Header().Get("Etag") != `"v1"` {
		t.Errorf("replay of a response that fits: %d %q %v", w.Code, w.Body, w.Header())
	}
	if runs != 2 {
		t.Errorf("the handler ran %d times, want 2", runs)
	}
}
