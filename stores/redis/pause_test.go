package redisstore

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/redis/go-redis/v9"
)

// pausedRig is the engine on a private redis-server that a test can pause
// with CLIENT PAUSE: commands sent meanwhile wait and then run, as with a
// server that stalls (a fork, a slow disk, a failover in progress).
type pausedRig struct {
	t     *testing.T
	admin *redis.Client
	h     http.Handler
	runs  atomic.Int32
	pause func() // called by the handler, when set
}

func newPausedRig(t *testing.T) *pausedRig {
	srv := startServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	admin := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close(); _ = admin.Close() })
	engine, err := idem.New(newTestStore(t, client), idem.WithStoreTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rig := &pausedRig{t: t, admin: admin}
	rig.h = engine.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := rig.runs.Add(1)
		if rig.pause != nil {
			rig.pause()
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", n)
	}))
	return rig
}

func (p *pausedRig) pauseFor(d time.Duration) {
	p.t.Helper()
	if err := p.admin.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pausedRig) post(key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":1}`))
	req.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, req)
	return w
}

// untilNot retries key every 200 ms, as a client honouring Retry-After:
// 1 would, while it gets 409 or 503, for at most limit.
func (p *pausedRig) untilNot(key string, limit time.Duration) (*httptest.ResponseRecorder, int) {
	p.t.Helper()
	deadline := time.Now().Add(limit)
	for conflicts := 0; ; conflicts++ {
		w := p.post(key)
		if w.Code != http.StatusConflict && w.Code != http.StatusServiceUnavailable {
			return w, conflicts
		}
		if ra := w.Header().Get("Retry-After"); ra != "1" {
			p.t.Errorf("%d with Retry-After %q, want 1", w.Code, ra)
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("still %d after %v", w.Code, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPausedRedis is the stall this engine must ride out: a claim that
// lands after its caller timed out is released once Redis answers again,
// so the client told 503 runs on its retry instead of getting 409 for the
// lease; and a completion that times out lands later, so the retry replays
// instead of running the handler again.
func TestPausedRedis(t *testing.T) {
	t.Parallel() // on servers of its own, it mostly waits
	t.Run("a claim that lands late", func(t *testing.T) {
		p := newPausedRig(t)
		p.pauseFor(time.Second)
		if w := p.post("late-claim"); w.Code != http.StatusServiceUnavailable {
			t.Fatalf("during the pause: %d %q, want 503", w.Code, w.Body)
		}
		time.Sleep(time.Second) // the claim lands when the pause ends
		w, conflicts := p.untilNot("late-claim", 10*time.Second)
		if w.Code != http.StatusCreated || w.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("retry after the pause: %d %q, want a fresh 201", w.Code, w.Body)
		}
		t.Logf("retry ran after %d 409s and 503s", conflicts)
		if n := p.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times", n)
		}
	})
	t.Run("a completion that times out", func(t *testing.T) {
		p := newPausedRig(t)
		p.pause = func() { p.pauseFor(time.Second) }
		if w := p.post("late-complete"); w.Code != http.StatusCreated || w.Body.String() != "order 1" {
			t.Fatalf("first: %d %q, want the handler's 201", w.Code, w.Body)
		}
		p.pause = nil
		w, conflicts := p.untilNot("late-complete", 10*time.Second)
		if w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != "order 1" {
			t.Fatalf("retry after the pause: %d %q, want the replay", w.Code, w.Body)
		}
		t.Logf("replayed after %d 409s and 503s", conflicts)
		if n := p.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times", n)
		}
	})
}
