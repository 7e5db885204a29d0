package redisstore

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

// serverStats is what a private server reports about the work it did:
// calls per command (commands that scripts run included) and the bytes it
// read from clients and wrote to them (Pub/Sub messages included).
type serverStats struct {
	calls             map[string]int64
	inBytes, outBytes int64
}

// readStats reads INFO stats and commandstats in one INFO call.
func readStats(t *testing.T, c *redis.Client) serverStats {
	t.Helper()
	info, err := c.Info(t.Context(), "stats", "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	st := serverStats{calls: map[string]int64{}}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_net_input_bytes:"); ok {
			st.inBytes, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "total_net_output_bytes:"); ok {
			st.outBytes, _ = strconv.ParseInt(v, 10, 64)
		}
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		st.calls[name], _ = strconv.ParseInt(n, 10, 64)
	}
	return st
}

// statsDelta measures what the server does during run: the calls per
// command, INFO and the subscription's PING left out, and the bytes read
// and written, the INFO that reads them left out (its reply, a few kB,
// to within a few bytes).
func statsDelta(t *testing.T, c *redis.Client, run func()) serverStats {
	t.Helper()
	a := readStats(t, c)
	b := readStats(t, c) // an INFO alone, to take its bytes off
	run()
	d := readStats(t, c)
	delta := serverStats{
		calls:    map[string]int64{},
		inBytes:  d.inBytes - b.inBytes - (b.inBytes - a.inBytes),
		outBytes: d.outBytes - b.outBytes - (b.outBytes - a.outBytes),
	}
	for name, n := range d.calls {
		if n -= b.calls[name]; n != 0 && name != "info" && name != "ping" {
			delta.calls[name] = n
		}
	}
	return delta
}

// privateServer starts a redis-server of the test's own, so that its
// counters move only with what the test does.
func privateServer(t *testing.T) *redis.Client {
	t.Helper()
	srv := startServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestCommandsPerRequest counts, on a server of its own, what a first
// request costs: through the engine's middleware with no waiter, exactly
// the claim (SET NX GET) and the complete script (its GET, SET and the
// waiter-mark DEL), and no PUBLISH. Then, for each way a claim ends, no
// PUBLISH without a waiter and one with a waiter in another Store. It
// logs the bytes Redis reads per first request.
func TestCommandsPerRequest(t *testing.T) {
	client := privateServer(t)
	s := newTestStore(t, client)
	engine, err := idem.New(withoutClock(s))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":42}`)
	})
	h := engine.Middleware()(mux)
	var seq int
	first := func() {
		seq++
		req := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", "key-"+strconv.Itoa(seq))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated || rec.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("request %d: %d %v", seq, rec.Code, rec.Header())
		}
	}
	first() // loads the complete script
	// Another instance, subscribed as every instance that ever waited is.
	waiter, err := New(client, WithPrefix(s.prefix), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	subscribed(t, waiter)

	const n = 20
	d := statsDelta(t, client, func() {
		for range n {
			first()
		}
	})
	want := map[string]int64{"set": 2 * n, "evalsha": n, "get": n, "del": n}
	if !maps.Equal(d.calls, want) {
		t.Errorf("%d first requests ran %v, want %v", n, d.calls, want)
	}
	t.Logf("%d first requests: server-side calls %v; per request, Redis read %d bytes and wrote %d",
		n, d.calls, d.inBytes/n, d.outBytes/n)

	// Each way a claim ends, with no waiter and with one in another
	// Store: a PUBLISH only for the waited-for record.
	for _, step := range endSteps {
		for _, waited := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/waited=%v", step.name, waited), func(t *testing.T) {
				ctx := t.Context()
				key := fmt.Sprintf("%s-%v", step.name, waited)
				now := time.Now()
				c := store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)}
				if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
					t.Fatal(res, err)
				}
				ch := make(<-chan struct{})
				if waited {
					var stop func()
					if ch, stop, err = waiter.Watch(ctx, refOf("s", key)); err != nil {
						t.Fatal(err)
					}
					defer stop()
				}
				calls := statsDelta(t, client, func() {
					if err := step.do(ctx, s, key); err != nil {
						t.Fatal(err)
					}
				}).calls
				if want := map[bool]int64{false: 0, true: 1}[waited]; calls["publish"] != want {
					t.Errorf("%s ran %v, want %d PUBLISH", step.name, calls, want)
				}
				if waited {
					select {
					case <-ch:
					case <-time.After(5 * time.Second):
						t.Fatal("the waiter was not woken")
					}
				}
			})
		}
	}
}
