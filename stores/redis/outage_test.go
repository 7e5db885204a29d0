package redisstore

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

// TestOutage kills the Store's Redis server, checks that calls fail within
// their context deadline instead of hanging, restarts the server on the
// same port and checks that the same Store, and its notifications,
// recover by themselves.
func TestOutage(t *testing.T) {
	srv := startServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s := newTestStore(t, client)
	ctx := t.Context()

	claim := func(ctx context.Context, key string) (store.ClaimResult, error) {
		now := time.Now()
		return s.Claim(ctx, store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)})
	}
	for i := range 10 {
		if res, err := claim(ctx, fmt.Sprint("before-", i)); err != nil || !res.Acquired {
			t.Fatalf("claim before the outage: %+v, %v", res, err)
		}
	}
	// A pending watch is woken when the subscription breaks.
	subscribed(t, s)
	ch, stop, err := s.Watch(ctx, refOf("s", "before-0"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	srv.kill()

	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Error("a pending watch was not woken when the server went away")
	}
	for i := range 3 {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		start := time.Now()
		_, err := claim(cctx, fmt.Sprint("during-", i))
		elapsed := time.Since(start)
		cancel()
		if err == nil {
			t.Fatal("claim succeeded with the server down")
		}
		if elapsed > time.Second {
			t.Fatalf("claim with a 200ms deadline took %v to fail: %v", elapsed, err)
		}
		t.Logf("claim during the outage failed after %v: %v", elapsed.Round(time.Millisecond), err)
	}
	// Watch does not wait for the subscription while the server is down.
	start := time.Now()
	if _, stop, err := s.Watch(ctx, refOf("s", "during")); err != nil {
		t.Fatal(err)
	} else {
		stop()
	}
	if elapsed := time.Since(start); elapsed > 100*time.Millisecond {
		t.Fatalf("Watch with the server down took %v", elapsed)
	}

	srv.start()

	// The same Store works again: the first call after the restart may
	// still meet a dead pooled connection, which go-redis retries.
	var res store.ClaimResult
	deadline := time.Now().Add(5 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		res, err = claim(cctx, "after")
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || !res.Acquired {
		t.Fatalf("claim after the restart: %+v, %v", res, err)
	}
	// Notifications recover too, once the Store has resubscribed.
	for numSub(t, s) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the Store did not resubscribe within 5s of the restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ch, stop2, err := s.Watch(ctx, refOf("s", "after"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	if err := s.Release(ctx, holdOf("s", "after", "tok")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("watch not woken by a release after the restart")
	}
}

// TestEngineOutage runs requests through the engine's net/http middleware
// with this store: with Redis killed a request gets 503 within the
// engine's store timeout, and once Redis is back requests run again.
func TestEngineOutage(t *testing.T) {
	srv := startServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s := newTestStore(t, client)

	const storeTimeout = 300 * time.Millisecond
	engine, err := idem.New(s, idem.WithStoreTimeout(storeTimeout))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", runs)
	})
	h := engine.Middleware()(mux)
	post := func(key string) (*http.Response, string, time.Duration) {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":1}`))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(rec, req)
		elapsed := time.Since(start)
		body, _ := io.ReadAll(rec.Result().Body)
		return rec.Result(), string(body), elapsed
	}

	if resp, body, _ := post("k1"); resp.StatusCode != http.StatusCreated || body != "order 1" {
		t.Fatalf("first request: %d %q", resp.StatusCode, body)
	}
	if resp, body, _ := post("k1"); resp.StatusCode != http.StatusCreated || body != "order 1" || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %q %v", resp.StatusCode, body, resp.Header)
	}

	srv.kill()
	for _, key := range []string{"k1", "k2"} {
		resp, body, elapsed := post(key)
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("request %s with Redis down: %d %q, want 503", key, resp.StatusCode, body)
		}
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("503 without Retry-After: %v", resp.Header)
		}
		if elapsed > storeTimeout+200*time.Millisecond {
			t.Errorf("503 took %v, want within the store timeout %v", elapsed, storeTimeout)
		}
		t.Logf("request %s with Redis down: 503 after %v", key, elapsed.Round(time.Millisecond))
	}
	if runs != 1 {
		t.Fatalf("handler ran %d times, want 1", runs)
	}

	srv.start()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, body, _ := post("k3")
		if resp.StatusCode == http.StatusCreated {
			if body != "order 2" {
				t.Fatalf("after the restart: %q, want order 2", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine still answers %d %q 5s after the restart", resp.StatusCode, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
