package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/core/store"
)

// TestReplayCache: with the cache on, retries of a completed request
// replay with no store call, until the cache's TTL; another body still
// gets the store's 422; a record in progress is never cached; an
// eviction through this engine's admin handler is seen at once.
func TestReplayCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s, WithReplayCache(1<<20, time.Minute))
		runs := 0
		release := make(chan struct{})
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if r.Header.Get("X-Block") != "" {
				<-release
			}
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(201)
			w.Write([]byte("order " + r.URL.Path))
		}))
		if w := post(h, "/a", "k", "x"); w.Code != 201 {
			t.Fatalf("first: %d", w.Code)
		}
		claims := s.count("claim")
		for range 10 {
			w := post(h, "/a", "k", "x")
			if w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != "order /a" || w.Header().Get("Content-Type") != "text/plain" {
				t.Fatalf("cached replay: %d %v %q", w.Code, w.Header(), w.Body)
			}
		}
		if n := s.count("claim") - claims; n != 0 {
			t.Errorf("10 replays made %d store claims, want 0", n)
		}
		if w := post(h, "/a", "k", "other"); w.Code != http.StatusUnprocessableEntity || s.count("claim") != claims+1 {
			t.Errorf("another body: %d, want the store's 422", w.Code)
		}

		// After the TTL the store is asked again (and the record learned anew).
		time.Sleep(time.Minute)
		post(h, "/a", "k", "x")
		if n := s.count("claim") - claims; n != 2 {
			t.Errorf("after the TTL: %d claims since the first, want 2", n)
		}

		// In progress: never cached, so the retry after completion replays.
		go func() {
			r := httptest.NewRequest("POST", "/b", strings.NewReader("x"))
			r.Header.Set("Idempotency-Key", "kb")
			r.Header.Set("X-Block", "1")
			h.ServeHTTP(httptest.NewRecorder(), r)
		}()
		synctest.Wait()
		if w := post(h, "/b", "kb", "x"); w.Code != http.StatusConflict {
			t.Errorf("in progress: %d, want 409", w.Code)
		}
		close(release)
		synctest.Wait()
		if w := post(h, "/b", "kb", "x"); w.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("after completion: %d, want the replay", w.Code)
		}

		// Evicted through this engine: the next retry runs again.
		before := runs
		code, out := adminDo(t, e.AdminHandler(), "DELETE", url.Values{"method": {"POST"}, "route": {""}, "key": {"k"}})
		if code != 200 || out["deleted"] != true {
			t.Fatalf("evict: %d %v", code, out)
		}
		if w := post(h, "/a", "k", "x"); w.Header().Get("Idempotent-Replayed") == "true" || runs != before+1 {
			t.Errorf("after an eviction here: replayed=%q, %d new runs; want a fresh run", w.Header().Get("Idempotent-Replayed"), runs-before)
		}
	})
}

// TestReplayCacheBound: the cache holds at most its bytes, dropping the
// least recently used record; a record larger than all of it is not kept.
func TestReplayCacheBound(t *testing.T) {
	c := newReplayCache(4000, time.Hour)
	rec := func(n int) *record {
		return &record{State: store.Completed, Fingerprint: "f", ExpiresAt: time.Now().Add(time.Hour), Response: &Response{Status: 200, Body: []byte(strings.Repeat("x", n))}}
	}
	now := time.Now()
	c.put("s", "a", rec(1000), false, now, 0)
	c.put("s", "b", rec(1000), false, now, 0)
	c.get("s", "a", now) // a is now the most recent
	c.put("s", "c", rec(1000), false, now, 0)
	if c.get("s", "b", now) != nil || c.get("s", "a", now) == nil || c.get("s", "c", now) == nil {
		t.Errorf("want b dropped, a and c kept")
	}
	if c.bytes > c.max {
		t.Errorf("%d bytes held, over %d", c.bytes, c.max)
	}
	c.put("s", "big", rec(5000), false, now, 0)
	if c.get("s", "big", now) != nil {
		t.Errorf("a record larger than the cache was kept")
	}
	c.put("s", "old", &record{State: store.Completed, Fingerprint: "f", ExpiresAt: now.Add(-time.Second), Response: &Response{Status: 200}}, false, now, 0)
	if c.get("s", "old", now) != nil {
		t.Errorf("an expired record was replayed")
	}
	c.put("s", "running", &record{State: store.InProgress, Fingerprint: "f", ExpiresAt: now.Add(time.Hour), LeaseEnd: now.Add(time.Hour)}, false, now, 0)
	if c.get("s", "running", now) != nil {
		t.Errorf("a record in progress was cached")
	}
	if _, err := New(newTestStore(), WithReplayCache(0, time.Second)); !errors.Is(err, ErrBadOption) {
		t.Errorf("zero bytes: %v", err)
	}
}

// BenchmarkReplayCache compares a replay with the cache on, a replay
// through the store, and the bare handler, on a 1 KiB response:
//
//	go test -run '^$' -bench ReplayCache -count 8 ./core | benchstat -col /path -
func BenchmarkReplayCache(b *testing.B) {
	body := []byte(strings.Repeat("x", 1024))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(201)
		w.Write(body)
	})
	cached, err := New(newTestStore(), WithReplayCache(1<<20, time.Hour), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	plain, err := New(newTestStore(), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		h    http.Handler
		key  string
	}{
		{"bare", handler, ""},
		{"cache", cached.Middleware()(handler), "k"},
		{"store", plain.Middleware()(handler), "k"},
	} {
		b.Run("path="+tc.name, func(b *testing.B) {
			post(tc.h, "/", tc.key, "x") // the first request, stored
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("POST", "/", strings.NewReader("x"))
				if tc.key != "" {
					r.Header.Set("Idempotency-Key", tc.key)
				}
				tc.h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
}

// pausingStore pauses the first Claim that finds a completed record after
// reading it, until proceed is closed: what another goroutine does
// meanwhile lands between the store's read and the engine's use of it.
type pausingStore struct {
	*testStore
	once    sync.Once
	read    chan struct{}
	proceed chan struct{}
	delay   time.Duration // instead of proceed, when set
}

func (s *pausingStore) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	res, err := s.testStore.Claim(ctx, c)
	if err == nil && res.Existing != nil && res.Existing.State == store.Completed {
		s.once.Do(func() {
			close(s.read)
			if s.delay > 0 {
				time.Sleep(s.delay)
			} else {
				<-s.proceed
			}
		})
	}
	return res, err
}

// TestReplayCacheAdminDeleteRace: an eviction through the admin handler
// that lands while a request holds the record it read before is not undone
// when that request caches what it read.
func TestReplayCacheAdminDeleteRace(t *testing.T) {
	ts := newTestStore()
	s := &pausingStore{testStore: ts, read: make(chan struct{}), proceed: make(chan struct{})}
	e, _ := newEngine(t, s, WithReplayCache(1<<20, time.Hour))
	runs := 0
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(201)
	}))
	post(h, "/a", "k", "x")
	e.cache.drop(Scope("", "POST", ""), "k") // as if its TTL ran out: the next retry reads the store
	done := make(chan struct{})
	go func() { post(h, "/a", "k", "x"); close(done) }()
	<-s.read
	if code, out := adminDo(t, e.AdminHandler(), "DELETE", url.Values{"method": {"POST"}, "route": {""}, "key": {"k"}}); code != 200 || out["deleted"] != true {
		t.Fatalf("delete: %d %v", code, out)
	}
	close(s.proceed)
	<-done
	if w := post(h, "/a", "k", "x"); w.Header().Get("Idempotent-Replayed") == "true" || runs != 2 {
		t.Errorf("after the eviction the retry replayed the evicted record (runs %d, want 2)", runs)
	}
}

// TestReplayCacheTTLCountsFromTheRead: the cache's TTL bounds how long
// after the store's read a copy replays, however late the answer came.
func TestReplayCacheTTLCountsFromTheRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := newTestStore()
		s := &pausingStore{testStore: ts, read: make(chan struct{}), delay: 4 * time.Second}
		a, _ := newEngine(t, s, WithReplayCache(1<<20, 5*time.Second), WithStoreTimeout(10*time.Second))
		b, _ := newEngine(t, ts)
		runs := 0
		hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++; w.WriteHeader(201) })
		post(b.Middleware()(hf), "/a", "k", "x")
		go post(a.Middleware()(hf), "/a", "k", "x") // read at 0, answered at 4 s
		<-s.read
		read := time.Now()
		time.Sleep(6 * time.Second)
		if w := post(a.Middleware()(hf), "/a", "k", "x"); w.Header().Get("Idempotent-Replayed") == "true" && s.count("claim") == 2 {
			t.Errorf("a copy read %v ago replayed from the cache; its TTL is 5s", time.Since(read))
		}
	})
}

// TestReplayCacheBytesBound: the bytes the cache counts are about what it
// holds, headers and bookkeeping included.
func TestReplayCacheBytesBound(t *testing.T) {
	for _, headers := range []int{0, 8} {
		const max = 4 << 20
		c := newReplayCache(max, time.Hour)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range 100_000 {
			h := http.Header{}
			for j := range headers {
				h["X-H"+strconv.Itoa(j)] = []string{"v"}
			}
			c.put("POST /orders", fmt.Sprintf("key-%08d", i), &record{State: store.Completed, Fingerprint: strings.Repeat("f", 71),
				ExpiresAt: time.Now().Add(time.Hour), Response: &Response{Status: 204, Header: h}}, true, time.Now(), 0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := float64(after.HeapAlloc) - float64(before.HeapAlloc)
		ratio := held / float64(c.bytes)
		if ratio > 1.5 {
			t.Errorf("%d headers: the cache holds %.0f bytes where it counts %d (%.1f×)", headers, held, c.bytes, ratio)
		}
		t.Logf("%d headers: %d entries, held ÷ counted = %.2f", headers, len(c.m), ratio)
		runtime.KeepAlive(c)
	}
}

// TestReplayCacheDropsWhatItCannotKeep: a newer record too large to keep
// drops the older copy of its key; an admin delete that failed still drops
// this engine's copy.
func TestReplayCacheDropsWhatItCannotKeep(t *testing.T) {
	c := newReplayCache(1<<10, time.Hour)
	rec := func(n int) *record {
		return &record{State: store.Completed, ExpiresAt: time.Now().Add(time.Hour), Response: &Response{Status: 200, Body: make([]byte, n)}}
	}
	c.put("s", "k", rec(10), false, time.Now(), 0)
	c.put("s", "k", rec(4<<10), false, time.Now(), 0)
	if c.get("s", "k", time.Now()) != nil {
		t.Error("an older copy outlived a newer record too large to cache")
	}
}

// TestReplayCacheRefusedPutDropsTheOldCopy: a put refused because an
// eviction came after its read still removes an older copy of its key.
func TestReplayCacheRefusedPutDropsTheOldCopy(t *testing.T) {
	c := newReplayCache(1<<20, time.Hour)
	now := time.Now()
	rec := &record{State: store.Completed, ExpiresAt: now.Add(time.Hour), Response: &Response{Status: 200}}
	c.put("s", "k", rec, false, now, c.generation())
	gen := c.generation()
	c.drop("s", "other") // an eviction of another key, after gen was read
	c.put("s", "k", rec, false, now, c.generation())
	c.put("s", "k", rec, false, now, gen) // refused
	if c.get("s", "k", now) != nil {
		t.Error("an older copy outlived a refused put of its key")
	}
}
