package idem

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/core/store"
)

// events collects observer events.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func (e *events) observe(_ context.Context, ev Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) outcomes() []Outcome {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Outcome
	for _, ev := range e.evs {
		out = append(out, ev.Outcome)
	}
	return out
}

func newEngine(t *testing.T, s Store, opts ...Option) (*Engine, *events) {
	t.Helper()
	ev := &events{}
	e, err := New(s, append([]Option{WithObserver(ev.observe)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return e, ev
}

// badOptionPanic runs fn, which must panic with an error wrapping
// ErrBadOption, and returns that error.
func badOptionPanic(t *testing.T, fn func()) (err error) {
	t.Helper()
	defer func() {
		r := recover()
		err, _ = r.(error)
		if !errors.Is(err, ErrBadOption) {
			t.Errorf("panic %v, want an error wrapping ErrBadOption", r)
		}
	}()
	fn()
	return nil
}

func post(h http.Handler, target, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", target, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestNewRejectsBadOptions(t *testing.T) {
	s := newTestStore()
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"lease", []Option{WithLease(0)}},
		{"retention", []Option{WithRetention(-time.Second)}},
		{"store timeout", []Option{WithStoreTimeout(0)}},
		{"wait", []Option{WithWait(0)}},
		{"heartbeat", []Option{WithHeartbeat(-time.Second)}},
		{"retry-after", []Option{WithRetryAfter(0)}},
		{"completion retry", []Option{WithCompletionRetry(-time.Second)}},
		{"pending bytes", []Option{WithMaxPendingBytes(0)}},
		{"heartbeat longer than lease", []Option{WithLease(time.Second), WithHeartbeat(time.Second)}},
		{"nil clock", []Option{WithClock(nil)}},
		{"lease longer than retention", []Option{WithLease(48 * time.Hour), WithRetention(24 * time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(s, tc.opts...); !errors.Is(err, ErrBadOption) {
				t.Errorf("New: %v, want ErrBadOption", err)
			}
		})
	}
	for name, fn := range map[string]func(){
		"GET":             func() { WithMethods("POST", "GET") },
		"no methods":      func() { WithMethods() },
		"header":          func() { WithKeyHeader("Bad Header") },
		"replay header":   func() { WithReplayHeader("") },
		"request cap":     func() { WithMaxRequestBody(0) },
		"response cap":    func() { WithMaxResponseBody(-1) },
		"nil namespace":   func() { WithNamespace(nil) },
		"nil fingerprint": func() { WithFingerprint(nil) },
		"nil release":     func() { WithReleaseRule(nil) },
		"problem base":    func() { WithProblemTypeBase("") },
		"nil route func":  func() { RouteFunc(nil) },
	} {
		t.Run(name, func(t *testing.T) { badOptionPanic(t, fn) })
	}
	if _, err := New(nil); !errors.Is(err, ErrBadOption) {
		t.Errorf("New(nil): %v", err)
	}
	if _, err := New((*testStore)(nil)); !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "*idem.testStore") {
		t.Errorf("New with a typed nil store: %v, want ErrBadOption naming the type", err)
	}
	type plain struct{ Store }
	if _, err := New(plain{s}, WithHeartbeat(time.Second)); err == nil || !strings.Contains(err.Error(), "Extender") {
		t.Errorf("heartbeat without Extender: %v", err)
	}
}

func TestObserverGetsOneEventPerRequest(t *testing.T) {
	s := newTestStore()
	e, ev := newEngine(t, s)
	code := 201
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
	})
	h := e.Middleware()(inner)
	post(h, "/", "a", "")                                                     // executed
	post(h, "/", "a", "")                                                     // replayed
	post(h, "/", "a", "other")                                                // mismatch
	post(h, "/", "", "")                                                      // missing
	post(h, "/", `"x`, "")                                                    // invalid
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)) // no event
	post(e.Middleware(Optional())(inner), "/", "", "")                        // skipped
	code = 500
	post(h, "/", "b", "") // released
	want := []Outcome{OutcomeExecuted, OutcomeReplayed, OutcomeFingerprintMismatch, OutcomeMissingKey, OutcomeInvalidKey, OutcomeSkipped, OutcomeReleased}
	got := ev.outcomes()
	if len(got) != len(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %s, want %s", i, got[i], want[i])
		}
	}
	if kh := ev.evs[0].KeyHash(); len(kh) != 16 || kh == "a" {
		t.Errorf("KeyHash %q", kh)
	}
}

func TestSlogObserverNeverLogsTheKey(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e, err := New(newTestStore(), WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	post(h, "/", "secret-key-123", "")
	post(h, "/", "secret-key-123", "")
	out := buf.String()
	if strings.Contains(out, "secret-key-123") {
		t.Fatalf("log contains the raw key: %s", out)
	}
	if !strings.Contains(out, `"outcome":"replayed"`) || !strings.Contains(out, "key_hash") {
		t.Errorf("log lacks the outcome or key hash: %s", out)
	}
}

// TestSlogObserverLevel: at info level, SlogObserverLevel(..., info)
// logs one line per execution and replay, SlogObserver none.
func TestSlogObserverLevel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		obs   func(*slog.Logger) Observer
		lines int
	}{
		{"SlogObserver", SlogObserver, 0},
		{"SlogObserverLevel info", func(l *slog.Logger) Observer { return SlogObserverLevel(l, slog.LevelInfo) }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
			e, err := New(newTestStore(), WithObserver(tc.obs(logger)))
			if err != nil {
				t.Fatal(err)
			}
			h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			post(h, "/", "k", "")
			post(h, "/", "k", "")
			if got := strings.Count(buf.String(), "level=INFO msg=idempotency"); got != tc.lines {
				t.Errorf("%d info lines, want %d: %s", got, tc.lines, buf.String())
			}
			if tc.lines > 0 && (!strings.Contains(buf.String(), "outcome=executed") || !strings.Contains(buf.String(), "outcome=replayed")) {
				t.Errorf("want an executed and a replayed line: %s", buf.String())
			}
		})
	}
}

func TestHijackReleases(t *testing.T) {
	s := newTestStore()
	e, ev := newEngine(t, s)
	var runs atomic.Int32
	srv := httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
		rw.Flush()
	})))
	defer srv.Close()
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest("POST", srv.URL, nil)
		req.Header.Set("Idempotency-Key", "h")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hi" {
			t.Errorf("body %q", b)
		}
	}
	if runs.Load() != 2 {
		t.Errorf("handler ran %d times, want 2 (a hijack releases the key)", runs.Load())
	}
	// The server emits its event after the hijacked handler returns,
	// which may be after the client has read the response.
	deadline := time.Now().Add(5 * time.Second)
	for len(ev.outcomes()) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := ev.outcomes(); len(got) != 2 || got[0] != OutcomeReleased || got[1] != OutcomeReleased {
		t.Errorf("outcomes %v", got)
	}
}

func TestFlushStreamsAndStoresWithoutBody(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s)
	var runs atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: 2\n\n")
	})))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Set("Idempotency-Key", "f")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if line != "data: 1\n" {
		t.Fatalf("first streamed line %q", line)
	}
	// The record was completed before the first byte: a retry replays now.
	req2, _ := http.NewRequest("POST", srv.URL, nil)
	req2.Header.Set("Idempotency-Key", "f")
	resp2, err := srv.Client().Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	close(release)
	resp.Body.Close()
	if resp2.Header.Get("Idempotent-Replayed") != "true" || resp2.Header.Get(HeaderBodyOmitted) != "true" || len(b) != 0 {
		t.Errorf("retry during a stream: %d %v %q", resp2.StatusCode, resp2.Header, b)
	}
	if resp2.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("replay lost Content-Type: %v", resp2.Header)
	}
	if runs.Load() != 1 {
		t.Errorf("handler ran %d times", runs.Load())
	}
}

func TestPanicReleasesAndRepanics(t *testing.T) {
	s := newTestStore()
	e, ev := newEngine(t, s)
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("partial"))
		panic("boom")
	}))
	for i := 0; i < 2; i++ {
		func() {
			defer func() {
				if v := recover(); v != "boom" {
					t.Errorf("recovered %v, want the handler's panic", v)
				}
			}()
			post(h, "/", "p", "")
		}()
	}
	if s.count("release") != 2 || s.count("complete") != 0 {
		t.Errorf("calls %v", s.calls)
	}
	// Headers the panicking handler set never reach the recovery's answer.
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "outer")
		defer func() {
			recover()
			if w.Header().Get("Set-Cookie") != "" || w.Header().Get("X-Request-Id") != "outer" {
				t.Errorf("headers after a panic: %v", w.Header())
			}
		}()
		e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Set-Cookie", "session=leaked")
			panic("boom")
		})).ServeHTTP(w, r)
	})
	post(outer, "/", "p2", "")
	if got := ev.outcomes(); len(got) != 3 || got[1] != OutcomeReleased {
		t.Errorf("outcomes %v", got)
	}
}

func TestReleaseRuleIsReplaceable(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	runs := 0
	h := e.Middleware(WithReleaseRule(func(status int) bool { return status == 409 }))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(500)
	}))
	post(h, "/", "k", "")
	if w := post(h, "/", "k", ""); w.Header().Get("Idempotent-Replayed") != "true" || w.Code != 500 {
		t.Errorf("500 with a custom rule: %d %v", w.Code, w.Header())
	}
	if runs != 1 {
		t.Errorf("runs %d", runs)
	}
}

func TestHeadersNeverStored(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Date", "Mon, 01 Jan 2024 00:00:00 GMT")
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("X-Multi", "1")
		w.Header().Add("X-Multi", "2")
		w.WriteHeader(201)
		w.Header().Set("X-After", "ignored")
		w.Write([]byte("ok"))
	}))
	first := post(h, "/", "k", "")
	if first.Header().Get("Set-Cookie") != "a=1" || first.Header().Get("X-After") != "" {
		t.Errorf("first response headers %v", first.Header())
	}
	w := post(h, "/", "k", "")
	for _, k := range []string{"Connection", "X-Hop", "Keep-Alive", "Date", "Set-Cookie", "X-After"} {
		if v := w.Header().Get(k); v != "" {
			t.Errorf("replay carries %s: %q", k, v)
		}
	}
	if got := w.Header().Values("X-Multi"); len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Errorf("X-Multi %q", got)
	}
	if w.Header().Get("Content-Length") != "2" || w.Body.String() != "ok" {
		t.Errorf("replay %v %q", w.Header(), w.Body)
	}
}

func TestWaitModeRunsWhenTheFirstReleases(t *testing.T) {
	for _, notify := range []bool{true, false} {
		t.Run(map[bool]string{true: "notify", false: "poll"}[notify], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ts := newTestStore()
				var s Store = ts
				if notify {
					s = notifyingStore{ts}
				}
				e, ev := newEngine(t, s, WithWait(10*time.Second))
				var runs atomic.Int32
				h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if runs.Add(1) == 1 {
						time.Sleep(time.Second)
						w.WriteHeader(503)
						return
					}
					w.WriteHeader(201)
				}))
				done := make(chan *httptest.ResponseRecorder)
				go func() { done <- post(h, "/", "k", "") }()
				synctest.Wait()
				second := post(h, "/", "k", "")
				first := <-done
				if first.Code != 503 || second.Code != 201 || runs.Load() != 2 {
					t.Errorf("first %d, second %d, runs %d", first.Code, second.Code, runs.Load())
				}
				if got := ev.outcomes(); len(got) != 2 || got[0] != OutcomeReleased || got[1] != OutcomeExecuted {
					t.Errorf("outcomes %v", got)
				}
				if ev.evs[1].Waited < time.Second {
					t.Errorf("waited %v", ev.evs[1].Waited)
				}
			})
		})
	}
}

func TestWaitModeReplaysAfterWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ev := newEngine(t, notifyingStore{newTestStore()}, WithWait(10*time.Second))
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(2 * time.Second)
			w.Write([]byte("done"))
		}))
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- post(h, "/", "k", "") }()
		synctest.Wait()
		start := time.Now()
		second := post(h, "/", "k", "")
		<-done
		if second.Body.String() != "done" || second.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("second %d %q", second.Code, second.Body)
		}
		if waited := time.Since(start); waited != 2*time.Second {
			t.Errorf("the waiter woke after %v, want exactly when the first finished (2s)", waited)
		}
		if got := ev.outcomes(); got[len(got)-1] != OutcomeReplayedAfterWait && got[0] != OutcomeReplayedAfterWait {
			t.Errorf("outcomes %v", got)
		}
	})
}

func TestHeartbeatKeepsASlowClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s, WithLease(3*time.Second), WithHeartbeat(time.Second))
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(10 * time.Second)
			w.Write([]byte("slow"))
		}))
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- post(h, "/", "k", "") }()
		time.Sleep(8 * time.Second)
		if w := post(h, "/", "k", ""); w.Code != 409 {
			t.Errorf("during a heartbeat-extended claim: %d, want 409", w.Code)
		}
		first := <-done
		if first.Body.String() != "slow" {
			t.Errorf("first %q", first.Body)
		}
		if w := post(h, "/", "k", ""); w.Header().Get("Idempotent-Replayed") != "true" {
			t.Errorf("after completion: %d %v", w.Code, w.Header())
		}
		if s.count("extend") < 8 {
			t.Errorf("extend called %d times", s.count("extend"))
		}
	})
}

func TestLostClaimIsNotCompleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, ev := newEngine(t, s, WithLease(2*time.Second), WithHeartbeat(0))
		var runs atomic.Int32
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			if n == 1 {
				time.Sleep(5 * time.Second)
			}
			w.Write([]byte{byte('0' + n)})
		}))
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- post(h, "/", "k", "") }()
		time.Sleep(3 * time.Second)
		if w := post(h, "/", "k", ""); w.Body.String() != "2" {
			t.Fatalf("takeover after the lease: %d %q", w.Code, w.Body)
		}
		if w := <-done; w.Body.String() != "1" {
			t.Errorf("first still answers its client: %q", w.Body)
		}
		if w := post(h, "/", "k", ""); w.Body.String() != "2" {
			t.Errorf("the new owner's record was overwritten: %q", w.Body)
		}
		var lost bool
		for _, x := range ev.evs {
			lost = lost || errors.Is(x.Err, ErrLeaseLost)
		}
		if !lost {
			t.Error("no event reports the lost claim")
		}
	})
}

func TestStoreTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, ev := newEngine(t, slowStore{newTestStore()}, WithStoreTimeout(100*time.Millisecond))
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("handler ran") }))
		start := time.Now()
		w := post(h, "/", "k", "")
		if w.Code != 503 || w.Header().Get("Retry-After") == "" {
			t.Errorf("%d %v", w.Code, w.Header())
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Errorf("answered after %v, want the store timeout", d)
		}
		if got := ev.outcomes(); got[0] != OutcomeStoreFailure {
			t.Errorf("outcomes %v", got)
		}
	})
}

type slowStore struct{ *testStore }

func (s slowStore) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	<-ctx.Done()
	return store.ClaimResult{}, ctx.Err()
}

func TestClientHangupStillCompletes(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel() // the client goes away while the handler runs
		w.Write([]byte("x"))
	}))
	r := httptest.NewRequestWithContext(ctx, "POST", "/", nil)
	r.Header.Set("Idempotency-Key", "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if w := post(h, "/", "k", ""); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("after a hang-up the key is not completed: %d", w.Code)
	}
}

func TestMiddlewareRoutes(t *testing.T) {
	s := newTestStore()
	e, ev := newEngine(t, s)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /items/{id}", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(r.PathValue("id"))) })
	mux.HandleFunc("POST /skip", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("skip")) })
	h := e.Middleware(WithNamespace(func(r *http.Request) string { return r.Header.Get("X-Tenant") }), ForRoute("POST", "/skip", Skip()))(mux)
	post(h, "/items/1", "k", "")
	if w := post(h, "/items/2", "k", ""); w.Code != 422 {
		t.Errorf("same template, other path: %d, want 422", w.Code)
	}
	if w := post(h, "/skip", `"bad`, ""); w.Body.String() != "skip" {
		t.Errorf("skipped route: %d %q", w.Code, w.Body)
	}
	if w := post(h, "/nowhere", `"bad`, ""); w.Code != 404 {
		t.Errorf("unmatched: %d", w.Code)
	}
	if ev.evs[0].Route != "/items/{id}" {
		t.Errorf("route %q", ev.evs[0].Route)
	}
	// RouteFunc overrides the pattern.
	h2 := e.Middleware(RouteFunc(func(*http.Request) string { return "custom" }))(mux)
	post(h2, "/items/1", "k2", "")
	if got := ev.evs[len(ev.evs)-1].Route; got != "custom" {
		t.Errorf("RouteFunc route %q", got)
	}
}

// txStore adds a TxBeginner whose commit can be made to fail.
type txStore struct {
	*testStore
	fail      bool
	committed int
	rolled    int
}

type testTx struct {
	s *txStore
	h store.Hold
}

func (s *txStore) BeginTx(ctx context.Context, h store.Hold) (store.Tx, error) {
	return &testTx{s, h}, nil
}

func (t *testTx) Context(parent context.Context) context.Context { return parent }

func (t *testTx) Commit(ctx context.Context, c store.Completion) error {
	if t.s.fail {
		return errors.New("commit failed")
	}
	if err := t.s.Complete(ctx, t.h, c); err != nil {
		return err
	}
	t.s.committed++
	return nil
}

func (t *testTx) Rollback(ctx context.Context) error { t.s.rolled++; return nil }

func TestTransactionalCommitFailure(t *testing.T) {
	s := &txStore{testStore: newTestStore(), fail: true}
	e, _ := newEngine(t, s)
	runs := 0
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(201)
	}))
	// 503 with Retry-After: the client (idemclient, or any that retries a
	// 503) retries with the same key and learns the outcome.
	if w := post(h, "/", "k", ""); w.Code != 503 || w.Header().Get("Content-Type") != "application/problem+json" || w.Header().Get("Retry-After") == "" {
		t.Errorf("commit failure: %d %v, want a 503 problem with Retry-After", w.Code, w.Header())
	}
	s.fail = false
	if w := post(h, "/", "k", ""); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "" {
		t.Errorf("after a failed commit the key must be free: %d", w.Code)
	}
	if w := post(h, "/", "k", ""); w.Header().Get("Idempotent-Replayed") != "true" {
		t.Errorf("after a commit: %d", w.Code)
	}
	if runs != 2 || s.committed != 1 || s.rolled < 1 || s.count("complete") != 1 {
		t.Errorf("runs %d committed %d rolled %d calls %v", runs, s.committed, s.rolled, s.calls)
	}
}

func TestFingerprintRequestMatchesFingerprint(t *testing.T) {
	for _, target := range []string{"/", "/orders", "/orders?x=1&y=%20", "/a%2Fb?", "/caf%C3%A9", "*"} {
		r := httptest.NewRequest("POST", "http://example.com"+strings.TrimPrefix(target, "*"), nil)
		if target == "*" {
			r.URL.Path, r.URL.RawPath = "", ""
			r.URL.Opaque = "*"
		}
		body := []byte("body of " + target)
		if got, want := fingerprintRequest(r, body), Fingerprint("POST", r.URL.RequestURI(), body); got != want {
			t.Errorf("%s: fingerprintRequest %s, Fingerprint %s", target, got, want)
		}
	}
}

// TestDefaultLeaseCappedAtRetention: a retention shorter than the default
// lease caps the lease, and Lease reports the lease in effect.
func TestDefaultLeaseCappedAtRetention(t *testing.T) {
	e, err := New(newTestStore(), WithRetention(2*time.Second), WithHeartbeat(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	if e.Lease() != 2*time.Second {
		t.Errorf("Lease() = %v, want the retention, 2s", e.Lease())
	}
}

// TestBadRouteOptionsPanic: route options have no error to return, so a
// value that can never work panics where the routes are declared, with
// an error wrapping ErrBadOption.
func TestBadRouteOptionsPanic(t *testing.T) {
	for name, declare := range map[string]func(){
		"negative TTL":            func() { TTL(-time.Hour) },
		"zero TTL":                func() { TTL(0) },
		"TTL below a millisecond": func() { TTL(time.Microsecond) },
		"TTL above MaxLifetime":   func() { TTL(MaxLifetime + 1) },
		"ForRoute without method": func() { ForRoute("", "/orders", Skip()) },
		"ForRoute without slash":  func() { ForRoute("POST", "orders", Skip()) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, ErrBadOption) {
					t.Errorf("recovered %v, want an error wrapping ErrBadOption", err)
				}
			}()
			declare()
		})
	}
}

func TestRouteRules(t *testing.T) {
	got := RouteRules(
		ForRoute("post", "/orders", Skip()),
		Required(),
		nil,
		ForRoute("PATCH", "/orders/{id}", TTL(time.Hour)),
		ForRoute("POST", "/orders", Optional()),
	)
	want := []RouteRule{{"POST", "/orders"}, {"PATCH", "/orders/{id}"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("RouteRules = %v, want %v", got, want)
	}
	if got := RouteRules(Required()); len(got) != 0 {
		t.Errorf("RouteRules without ForRoute = %v", got)
	}
}

func TestCheckRoutes(t *testing.T) {
	routes := []RouteRule{{"POST", "/orders"}, {"get", "/orders/{id}"}}
	if err := CheckRoutes(routes, ForRoute("POST", "/orders", Skip()), ForRoute("GET", "/orders/{id}", Skip())); err != nil {
		t.Errorf("routes the router has: %v", err)
	}
	err := CheckRoutes(routes, ForRoute("POST", "/oders", Skip()), ForRoute("PUT", "/orders", Skip()))
	if !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "POST /oders, PUT /orders") {
		t.Errorf("a typo and a method the route lacks: %v", err)
	}
}
