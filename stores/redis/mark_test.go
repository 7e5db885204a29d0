package redisstore

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

// endStep ends the claim (key, "tok") through s.
type endStep struct {
	name string
	do   func(ctx context.Context, s *Store, key string) error
}

var endSteps = []endStep{
	{"Complete", func(ctx context.Context, s *Store, key string) error {
		now := time.Now()
		return s.Complete(ctx, holdOf("s", key, "tok"), completion(store.Result{Head: httpHead(201, nil), Body: []byte("ok")}, now, now.Add(time.Hour)))
	}},
	{"Release", func(ctx context.Context, s *Store, key string) error { return s.Release(ctx, holdOf("s", key, "tok")) }},
	{"Evict", func(ctx context.Context, s *Store, key string) error { return s.Evict(ctx, holdOf("s", key, "tok")) }},
	{"Delete", func(ctx context.Context, s *Store, key string) error {
		ok, err := s.Delete(ctx, refOf("s", key))
		if err == nil && !ok {
			err = fmt.Errorf("Delete found no record")
		}
		return err
	}},
}

// testMarks checks the waiter mark with two Stores on client under one
// prefix: ender (built with opts) takes and ends claims, waiter watches.
// They are separate Stores, so only a PUBLISH can wake the waiter.
func testMarks(t *testing.T, client redis.UniversalClient, opts ...Option) {
	ender := newTestStore(t, client, opts...)
	waiter, err := New(client, WithPrefix(ender.prefix), quiet, noFailover)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = waiter.Close() })
	subscribed(t, waiter)
	claim := func(t *testing.T, key string) {
		t.Helper()
		now := time.Now()
		res, err := ender.Claim(t.Context(), store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)})
		if err != nil || !res.Acquired {
			t.Fatalf("claim %s: %+v, %v", key, res, err)
		}
	}
	markTTL := func(t *testing.T, key string) time.Duration {
		t.Helper()
		d, err := client.PTTL(t.Context(), ender.Key("s", key)+"w").Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	woken := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(5 * time.Second):
			return false
		}
	}
	for _, step := range endSteps {
		t.Run(step.name+"/MarkThenEnd", func(t *testing.T) {
			key := "mark-then-" + step.name
			claim(t, key)
			ch, stop, err := waiter.Watch(t.Context(), refOf("s", key))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if closedNow(ch) {
				t.Fatal("woken before the claim ended")
			}
			if d := markTTL(t, key); d <= 0 {
				t.Fatalf("mark PTTL %v after Watch, want a mark that expires", d)
			}
			if err := step.do(t.Context(), ender, key); err != nil {
				t.Fatal(err)
			}
			if !woken(ch) {
				t.Fatalf("a marked record's %s did not wake the waiter", step.name)
			}
			if d := markTTL(t, key); d != -2 {
				t.Fatalf("mark PTTL %v after %s, want the mark gone", d, step.name)
			}
		})
		t.Run(step.name+"/EndThenMark", func(t *testing.T) {
			key := "end-then-" + step.name
			claim(t, key)
			if err := step.do(t.Context(), ender, key); err != nil {
				t.Fatal(err)
			}
			ch, stop, err := waiter.Watch(t.Context(), refOf("s", key))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if !closedNow(ch) {
				t.Fatalf("a Watch after the %s was not woken at once", step.name)
			}
			if d := markTTL(t, key); d != -2 {
				t.Fatalf("mark PTTL %v on an ended claim, want no mark", d)
			}
		})
	}

	// The waiter marks while the claim ends, in either order: it is
	// always woken.
	t.Run("Race", func(t *testing.T) {
		for i := range 100 {
			key := fmt.Sprint("race-", i)
			claim(t, key)
			step := endSteps[i%len(endSteps)]
			var wg sync.WaitGroup
			var endErr error
			wg.Go(func() { endErr = step.do(t.Context(), ender, key) })
			ch, stop, err := waiter.Watch(t.Context(), refOf("s", key))
			if err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if endErr != nil {
				t.Fatal(endErr)
			}
			if !woken(ch) {
				t.Fatalf("iteration %d: the waiter missed a %s", i, step.name)
			}
			stop()
		}
	})

	// Extend keeps the mark as long as the record.
	t.Run("ExtendMovesMark", func(t *testing.T) {
		claim(t, "extend")
		_, stop, err := waiter.Watch(t.Context(), refOf("s", "extend"))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		now := time.Now()
		if err := ender.Extend(t.Context(), holdOf("s", "extend", "tok"), now, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		rec, err := client.PTTL(t.Context(), ender.Key("s", "extend")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if mark := markTTL(t, "extend"); mark < time.Hour || rec-mark > time.Second {
			t.Fatalf("mark PTTL %v, record PTTL %v after Extend, want them alike", mark, rec)
		}
	})

	// A claim that takes an ended one over keeps its mark, as long as
	// itself, and its completion wakes the waiter.
	t.Run("TakeoverKeepsMark", func(t *testing.T) {
		claim(t, "takeover")
		ch, stop, err := waiter.Watch(t.Context(), refOf("s", "takeover"))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		later := time.Now().Add(2 * time.Minute) // past the first lease
		res, err := ender.Claim(t.Context(), store.Claim{Scope: "s", Key: "takeover", Fingerprint: "fp", Token: "tok2", Now: later, LeaseEnd: later.Add(time.Hour)})
		if err != nil || !res.Acquired {
			t.Fatalf("takeover: %+v, %v", res, err)
		}
		rec, err := client.PTTL(t.Context(), ender.Key("s", "takeover")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if mark := markTTL(t, "takeover"); mark < time.Hour || rec-mark > time.Second {
			t.Fatalf("mark PTTL %v, record PTTL %v after the takeover, want them alike", mark, rec)
		}
		if err := ender.Complete(t.Context(), holdOf("s", "takeover", "tok2"), completion(store.Result{Head: httpHead(200, nil)}, later, later.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		if !woken(ch) {
			t.Fatal("the completion of the claim that took over did not wake the waiter")
		}
	})
}

func TestMarks(t *testing.T) { testMarks(t, testClient(t)) }

func TestMarksCluster(t *testing.T) { testMarks(t, startCluster(t)) }

func TestMarksReplicas(t *testing.T) {
	rs := startReplicated(t)
	testMarks(t, rs.client, noFailover, WithReplicas(1, time.Second))
}

// TestWaitAcrossInstances runs the engine's wait mode on two instances,
// each with its own Store: a retry on B waits for the first request,
// still running on A, marks its record, and is answered with the replay
// once A completes, which publishes exactly once.
func TestWaitAcrossInstances(t *testing.T) {
	client := privateServer(t)
	a := newTestStore(t, client)
	b, err := New(client, WithPrefix(a.prefix), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	subscribed(t, b)
	release := make(chan struct{})
	var runs atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-release
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "made")
	})
	serve := func(s *Store) http.Handler {
		e, err := idem.New(s, idem.WithWait(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return e.Middleware()(handler)
	}
	ha, hb := serve(a), serve(b)
	send := func(h http.Handler) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/orders", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	var first, retry *httptest.ResponseRecorder
	var wg sync.WaitGroup
	d := statsDelta(t, client, func() {
		wg.Go(func() { first = send(ha) })
		for range 1000 { // A's claim is in Redis
			if runs.Load() == 1 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		wg.Go(func() { retry = send(hb) })
		for range 1000 { // B waits, and has marked the record
			var keys []string
			keys, err = client.Keys(t.Context(), a.prefix+"{*}w").Result()
			if err != nil || len(keys) == 1 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(release)
		wg.Wait()
	})
	if err != nil {
		t.Fatal(err)
	}
	if first.Code != http.StatusCreated || retry.Code != http.StatusCreated ||
		retry.Header().Get("Idempotent-Replayed") != "true" || retry.Body.String() != "made" {
		t.Fatalf("first %d, retry %d %v %q; want 201 and its replay", first.Code, retry.Code, retry.Header(), retry.Body)
	}
	if runs.Load() != 1 || d.calls["publish"] != 1 {
		t.Fatalf("handler ran %d times, %d PUBLISH; want 1 and 1", runs.Load(), d.calls["publish"])
	}
}
