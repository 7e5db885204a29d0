package idemclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	idem "github.com/idemkit/idem/core"
)

// TestAnswers runs one request against a server that answers the first
// attempt as the case says and every later one with 201, and checks
// whether it was retried, after how long, and what the caller got.
func TestAnswers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		first    step
		attempts int           // 2: retried; 1: returned
		waited   time.Duration // fake time until the final answer
		status   int
		body     string // the final body, when not "created"
	}{
		{"idem in progress", conflict("1"), 2, time.Second, 201, ""},
		{"in progress, other type base", answer(409, "application/problem+json", `{"type":"https://errors.example.com/#conflict","status":409}`, "2"), 2, 2 * time.Second, 201, ""},
		{"in progress, path-style type", answer(409, "application/problem+json", `{"type":"https://example.com/problems/conflict"}`, "1"), 2, time.Second, 201, ""},
		{"stripe in use", answer(409, "application/json", `{"error":{"code":"idempotency_key_in_use","type":"idempotency_error","message":"in use"}}`, ""), 2, 100 * time.Millisecond, 201, ""},
		{"application 409", answer(409, "application/json", `{"error":"order already exists"}`, "1"), 1, 0, 409, `{"error":"order already exists"}`},
		{"application 409 problem", answer(409, "application/problem+json", `{"type":"https://example.com/problems/duplicate-order"}`, ""), 1, 0, 409, `{"type":"https://example.com/problems/duplicate-order"}`},
		{"409 not JSON", answer(409, "text/plain", "conflict", "1"), 1, 0, 409, "conflict"},
		{"replayed in-progress-looking 409", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(DefaultReplayHeader, "true")
			conflict("1")(w, r)
		}, 1, 0, 409, idemConflict},
		{"429", answer(429, "", "slow down", "3"), 2, 3 * time.Second, 201, ""},
		{"502", answer(502, "", "bad gateway", ""), 2, 100 * time.Millisecond, 201, ""},
		{"503 store unavailable", answer(503, "application/problem+json", `{"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#store-unavailable"}`, "1"), 2, time.Second, 201, ""},
		{"504", answer(504, "", "", "0"), 2, 0, 201, ""},
		{"replayed 503", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(DefaultReplayHeader, "true")
			answer(503, "", "stored", "1")(w, r)
		}, 1, 0, 503, "stored"},
		{"500", answer(500, "", "boom", "1"), 1, 0, 500, "boom"},
		{"400", answer(400, "application/problem+json", `{"type":"x#invalid-key"}`, "1"), 1, 0, 400, `{"type":"x#invalid-key"}`},
		{"413", answer(413, "", "too large", "1"), 1, 0, 413, "too large"},
		{"422 key reused", answer(422, "application/problem+json", `{"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#key-reused"}`, ""), 1, 0, 422, `{"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#key-reused"}`},
		{"404", answer(404, "", "nope", ""), 1, 0, 404, "nope"},
		{"201", ok, 1, 0, 201, ""},
		{"dropped connection", drop, 2, 100 * time.Millisecond, 201, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &fakeServer{steps: []step{tc.first}}
				tr := newTransport(t, pipeServer(t, srv))
				start := time.Now()
				resp, body, err := post(t, t.Context(), tr, "order")
				if err != nil {
					t.Fatal(err)
				}
				want := tc.body
				if want == "" {
					want = "created"
				}
				if resp.StatusCode != tc.status || body != want {
					t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tc.status, want)
				}
				if got := len(srv.seen()); got != tc.attempts {
					t.Errorf("server saw %d attempts, want %d", got, tc.attempts)
				}
				if r, _ := ResultOf(resp); r.Attempts != tc.attempts {
					t.Errorf("Result.Attempts %d, want %d", r.Attempts, tc.attempts)
				}
				if d := time.Since(start); d != tc.waited {
					t.Errorf("final answer after %v, want %v", d, tc.waited)
				}
			})
		})
	}
}

func TestRetryAfterHTTPDate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The server's clock is an hour ahead: the date is read against
		// its Date header, so the wait is still 3 seconds.
		srv := &fakeServer{steps: []step{func(w http.ResponseWriter, r *http.Request) {
			now := time.Now().Add(time.Hour)
			w.Header().Set("Date", now.UTC().Format(http.TimeFormat))
			answer(503, "", "", now.Add(3*time.Second).UTC().Format(http.TimeFormat))(w, r)
		}}}
		tr := newTransport(t, pipeServer(t, srv))
		start := time.Now()
		if _, _, err := post(t, t.Context(), tr, "x"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("waited %v, want 3s", d)
		}
	})
}

func TestRetryAfterCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{steps: []step{answer(429, "", "", "3600")}}
		tr := newTransport(t, pipeServer(t, srv), WithRetryAfterCap(2*time.Second))
		start := time.Now()
		if _, _, err := post(t, t.Context(), tr, "x"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("waited %v, want the cap, 2s", d)
		}
	})
}

func TestBackoffAndAttemptLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		unavailable := answer(503, "", "still down", "")
		srv := &fakeServer{steps: []step{unavailable, unavailable, unavailable, unavailable, unavailable, unavailable}}
		var waits []time.Duration
		tr := newTransport(t, pipeServer(t, srv), WithBackoff(100*time.Millisecond, 300*time.Millisecond),
			WithOnAttempt(func(a Attempt) { waits = append(waits, a.Wait) }))
		resp, body, err := post(t, t.Context(), tr, "x")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 503 || body != "still down" {
			t.Errorf("final answer %d %q, want the last 503 with its body", resp.StatusCode, body)
		}
		want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond, 0}
		if !slices.Equal(waits, want) {
			t.Errorf("waits %v, want %v (doubling, capped, none after the last of 5)", waits, want)
		}
		if n := len(srv.seen()); n != DefaultMaxAttempts {
			t.Errorf("%d attempts, want %d", n, DefaultMaxAttempts)
		}
	})
}

func TestJitter(t *testing.T) {
	tr, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 10; n++ {
		limit := min(DefaultBackoffBase<<(n-1), DefaultBackoffCap)
		for range 100 {
			if d := tr.cfg.retry.backoff(n); d < 0 || d > limit {
				t.Fatalf("backoff(%d) = %v, want 0 to %v", n, d, limit)
			}
		}
	}
}

func TestBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		busy := conflict("10")
		srv := &fakeServer{steps: []step{busy, busy, busy}}
		tr := newTransport(t, pipeServer(t, srv), WithBudget(15*time.Second))
		start := time.Now()
		resp, _, err := post(t, t.Context(), tr, "x")
		if err != nil {
			t.Fatal(err)
		}
		// 0s: 409, wait 10s; 10s: 409, a wait to 20s would pass the budget.
		if d, n := time.Since(start), len(srv.seen()); resp.StatusCode != 409 || d != 10*time.Second || n != 2 {
			t.Errorf("got %d after %v and %d attempts, want 409 after 10s and 2", resp.StatusCode, d, n)
		}
	})
}

func TestContextWins(t *testing.T) {
	t.Run("a wait past the deadline is not begun", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{answer(503, "", "down", "10")}}
			tr := newTransport(t, pipeServer(t, srv))
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			start := time.Now()
			resp, body, err := post(t, ctx, tr, "x")
			if err != nil || resp.StatusCode != 503 || body != "down" || time.Since(start) != 0 {
				t.Errorf("got %v %v after %v; want the 503 at once", resp, err, time.Since(start))
			}
		})
	})
	t.Run("cancelled during the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{conflict("10")}}
			tr := newTransport(t, pipeServer(t, srv))
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(2*time.Second, cancel)
			start := time.Now()
			_, _, err := post(t, ctx, tr, "x")
			var e *Error
			if !errors.Is(err, context.Canceled) || !errors.As(err, &e) || e.Attempts != 1 || e.Key == "" {
				t.Errorf("error %v, want an *Error after 1 attempt wrapping context.Canceled", err)
			}
			if d := time.Since(start); d != 2*time.Second {
				t.Errorf("returned after %v, want 2s, when the context ended", d)
			}
			if n := len(srv.seen()); n != 1 {
				t.Errorf("%d attempts after the context ended", n)
			}
		})
	})
	t.Run("deadline during an attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
			}}}
			tr := newTransport(t, pipeServer(t, srv))
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, _, err := post(t, ctx, tr, "x")
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v, want the context's deadline", err)
			}
			if e, ok := errors.AsType[*Error](err); !ok || !e.Timeout() {
				t.Errorf("error %v: want an *Error whose Timeout is true", err)
			}
			if n := len(srv.seen()); n != 1 {
				t.Errorf("%d attempts, want 1: the caller's deadline is never retried", n)
			}
		})
	})
	t.Run("ended before the first attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{}
			tr := newTransport(t, pipeServer(t, srv))
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if _, _, err := post(t, ctx, tr, "x"); !errors.Is(err, context.Canceled) {
				t.Errorf("error %v, want context.Canceled", err)
			}
			if n := len(srv.seen()); n != 0 {
				t.Errorf("%d requests reached the server", n)
			}
		})
	})
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestKeys(t *testing.T) {
	t.Run("one generated key for every attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{drop, conflict("1"), answer(503, "", "", "0"), ok, drop, ok}}
			tr := newTransport(t, pipeServer(t, srv))
			req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://pipe/orders", strings.NewReader("x"))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if req.Header.Get(DefaultKeyHeader) != "" {
				t.Error("the caller's request was modified")
			}
			if _, _, err := post(t, t.Context(), tr, "x"); err != nil {
				t.Fatal(err)
			}
			s := srv.seen()
			if len(s) != 6 {
				t.Fatalf("%d requests, want 4 + 2", len(s))
			}
			for i, r := range s {
				if !uuidV4.MatchString(r.key) || r.keys != 1 {
					t.Errorf("request %d: key %q (%d lines), want one UUID v4", i, r.key, r.keys)
				}
				if first := s[0].key; i < 4 && r.key != first {
					t.Errorf("attempt %d: key %q, want %q as on the first", i+1, r.key, first)
				}
			}
			if s[4].key == s[0].key || s[5].key != s[4].key {
				t.Errorf("keys %q: want a new key per logical request, the same on its retry", []string{s[0].key, s[4].key, s[5].key})
			}
			if r, _ := ResultOf(resp); r.Key != s[0].key || r.Attempts != 4 || r.Replayed {
				t.Errorf("Result %+v, want key %q, 4 attempts, not replayed", r, s[0].key)
			}
		})
	})
	t.Run("the caller's key is kept", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{drop, replayed}}
			tr := newTransport(t, pipeServer(t, srv))
			resp, _, err := post(t, t.Context(), tr, "x", "idempotency-key", "order-42")
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range srv.seen() {
				if r.key != "order-42" || r.keys != 1 {
					t.Errorf("attempt %d: key %q (%d lines), want the caller's", i+1, r.key, r.keys)
				}
			}
			if r, ok := ResultOf(resp); !ok || r != (Result{Key: "order-42", Attempts: 2, Replayed: true}) {
				t.Errorf("Result %+v %v", r, ok)
			}
		})
	})
	t.Run("no key: sent once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{drop, drop}}
			tr := newTransport(t, pipeServer(t, srv), WithKeyFunc(func(*http.Request) string { return "" }))
			if _, _, err := post(t, t.Context(), tr, "x"); err == nil || errors.As(err, new(*Error)) {
				t.Errorf("error %v: want the base transport's, unwrapped", err)
			}
			if s := srv.seen(); len(s) != 1 || s[0].keys != 0 {
				t.Errorf("requests %+v, want one without a key", s)
			}
			// A key the caller set is still retried.
			if _, _, err := post(t, t.Context(), tr, "x", DefaultKeyHeader, "mine"); err != nil {
				t.Error(err)
			}
		})
	})
	t.Run("an empty key header is sent as it is", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{answer(503, "", "", "0")}}
			tr := newTransport(t, pipeServer(t, srv))
			resp, _, err := post(t, t.Context(), tr, "x", DefaultKeyHeader, "")
			if err != nil || resp.StatusCode != 503 || len(srv.seen()) != 1 {
				t.Errorf("got %v %v after %d requests, want the 503 after 1", resp, err, len(srv.seen()))
			}
		})
	})
	t.Run("custom header", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var got []string
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = append(got, r.Header.Get("X-Request-Key"))
				if len(got) == 1 {
					w.WriteHeader(503)
					return
				}
				w.Header().Set("X-Replayed", "true")
			})
			tr := newTransport(t, pipeServer(t, h), WithKeyHeader("x-request-key"), WithReplayHeader("X-Replayed"),
				WithKeyFunc(func(r *http.Request) string { return "k-" + r.URL.Path }))
			resp, _, err := post(t, t.Context(), tr, "x")
			if err != nil {
				t.Fatal(err)
			}
			if r, _ := ResultOf(resp); len(got) != 2 || got[0] != "k-/orders" || got[1] != got[0] || !r.Replayed {
				t.Errorf("keys %q, result %+v", got, r)
			}
		})
	})
}

func TestNewKey(t *testing.T) {
	seenKeys := map[string]bool{}
	for range 1000 {
		k := NewKey()
		if !uuidV4.MatchString(k) || seenKeys[k] {
			t.Fatalf("key %q: not a UUID v4, or seen before", k)
		}
		seenKeys[k] = true
	}
}

func TestMethods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		busy := answer(503, "", "", "0")
		srv := &fakeServer{steps: []step{busy, busy, busy, busy}}
		base := pipeServer(t, srv)
		tr := newTransport(t, base)
		for _, m := range []string{"GET", "PUT", "DELETE"} {
			req, _ := http.NewRequestWithContext(t.Context(), m, "http://pipe/orders/1", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if _, ok := ResultOf(resp); resp.StatusCode != 503 || ok {
				t.Errorf("%s: %d, result %v; want the 503 passed through", m, resp.StatusCode, ok)
			}
		}
		for _, r := range srv.seen() {
			if r.keys != 0 {
				t.Errorf("an unprotected request got the key %q", r.key)
			}
		}
		put := newTransport(t, base, WithMethods("put"))
		req, _ := http.NewRequestWithContext(t.Context(), "PUT", "http://pipe/orders/1", strings.NewReader("x"))
		resp, err := put.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if r, _ := ResultOf(resp); resp.StatusCode != 201 || r.Attempts != 2 {
			t.Errorf("PUT with WithMethods: %d after %d attempts", resp.StatusCode, r.Attempts)
		}
	})
}

func TestBodies(t *testing.T) {
	t.Run("GetBody", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{drop, answer(503, "", "", "0")}}
			tr := newTransport(t, pipeServer(t, srv))
			req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://pipe/orders", strings.NewReader(`{"item":"book"}`))
			var gets atomic.Int32
			get := req.GetBody
			req.GetBody = func() (io.ReadCloser, error) { gets.Add(1); return get() }
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if g := gets.Load(); g != 2 {
				t.Errorf("GetBody called %d times, want 2 (once per retry)", g)
			}
			checkBodies(t, srv, 3, `{"item":"book"}`)
		})
	})
	t.Run("buffered", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{drop, conflict("1")}}
			tr := newTransport(t, pipeServer(t, srv))
			if _, _, err := post(t, t.Context(), tr, strings.Repeat("b", 100_000)); err != nil {
				t.Fatal(err)
			}
			checkBodies(t, srv, 3, strings.Repeat("b", 100_000))
		})
	})
	t.Run("no body", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{drop}}
			tr := newTransport(t, pipeServer(t, srv))
			if _, _, err := post(t, t.Context(), tr, ""); err != nil {
				t.Fatal(err)
			}
			checkBodies(t, srv, 2, "")
		})
	})
	t.Run("too long to buffer: sent once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{answer(503, "", "busy", "0")}}
			var attempts []Attempt
			tr := newTransport(t, pipeServer(t, srv), WithMaxBufferedBody(10), WithOnAttempt(func(a Attempt) { attempts = append(attempts, a) }))
			resp, body, err := post(t, t.Context(), tr, "0123456789abcdef")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 503 || body != "busy" || len(attempts) != 1 || attempts[0].Retry {
				t.Errorf("got %d %q, attempts %+v; want the 503 after one attempt", resp.StatusCode, body, attempts)
			}
			checkBodies(t, srv, 1, "0123456789abcdef")
		})
	})
	t.Run("no buffering", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{drop}}
			tr := newTransport(t, pipeServer(t, srv), WithMaxBufferedBody(0))
			if _, _, err := post(t, t.Context(), tr, "x"); err == nil {
				t.Error("a body that cannot be replayed was retried")
			}
			checkBodies(t, srv, 1, "x")
		})
	})
	t.Run("GetBody fails", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{answer(503, "", "busy", "0")}}
			tr := newTransport(t, pipeServer(t, srv))
			req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://pipe/orders", strings.NewReader("x"))
			req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
			resp, err := tr.RoundTrip(req)
			if err != nil || resp.StatusCode != 503 {
				t.Fatalf("got %v %v, want the 503", resp, err)
			}
			resp.Body.Close()
			checkBodies(t, srv, 1, "x")
		})
	})
}

func checkBodies(t *testing.T, srv *fakeServer, n int, want string) {
	t.Helper()
	s := srv.seen()
	if len(s) != n {
		t.Errorf("%d attempts, want %d", len(s), n)
	}
	for i, r := range s {
		if r.body != want {
			t.Errorf("attempt %d sent %d bytes, want the whole body (%d)", i+1, len(r.body), len(want))
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestPeekedBodyIntact checks that the caller reads all of a 409 body the
// transport looked at, and that discarded bodies are closed.
func TestPeekedBodyIntact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		long := `{"error":"duplicate","pad":"` + strings.Repeat("p", 10_000) + `"}`
		srv := &fakeServer{steps: []step{answer(503, "", strings.Repeat("d", 100_000), "0"), answer(409, "application/json", long, "")}}
		var bodies []*trackedBody
		base := pipeServer(t, srv)
		tr := newTransport(t, roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := base.RoundTrip(r)
			if err == nil {
				b := &trackedBody{ReadCloser: resp.Body}
				bodies = append(bodies, b)
				resp.Body = b
			}
			return resp, err
		}))
		resp, body, err := post(t, t.Context(), tr, "x")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 409 || body != long {
			t.Errorf("got %d with %d bytes, want the 409 with all %d", resp.StatusCode, len(body), len(long))
		}
		if len(bodies) != 2 || !bodies[0].closed || !bodies[1].closed {
			t.Errorf("bodies %+v: want both closed", bodies)
		}
	})
}

type trackedBody struct {
	io.ReadCloser
	closed bool
}

func (b *trackedBody) Close() error { b.closed = true; return b.ReadCloser.Close() }

func TestAttemptHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{steps: []step{drop, conflict("2"), replayed}}
		var got []Attempt
		tr := newTransport(t, pipeServer(t, srv), WithOnAttempt(func(a Attempt) { got = append(got, a) }))
		resp, _, err := post(t, t.Context(), tr, "x")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Fatalf("%d attempts reported, want 3", len(got))
		}
		key := srv.seen()[0].key
		for i, a := range got {
			if a.Number != i+1 || a.Key != key || a.Request == nil || a.Request.Header.Get(DefaultKeyHeader) != key {
				t.Errorf("attempt %d: %+v", i+1, a)
			}
		}
		if a := got[0]; a.Err == nil || !errors.Is(a.Err, io.EOF) || a.Status != 0 || !a.Retry || a.Wait != 100*time.Millisecond {
			t.Errorf("dropped attempt: %+v", a)
		}
		if a := got[1]; a.Err != nil || a.Status != 409 || !a.Retry || a.Wait != 2*time.Second {
			t.Errorf("409 attempt: %+v", a)
		}
		if a := got[2]; a.Status != 201 || !a.Replayed || a.Retry || a.Wait != 0 {
			t.Errorf("final attempt: %+v", a)
		}
		if r, _ := ResultOf(resp); r != (Result{Key: key, Attempts: 3, Replayed: true}) {
			t.Errorf("Result %+v", r)
		}
	})
}

func TestErrorAfterLastAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{steps: []step{drop, drop, drop}}
		tr := newTransport(t, pipeServer(t, srv), WithMaxAttempts(3))
		_, _, err := post(t, t.Context(), tr, "x")
		e, ok := errors.AsType[*Error](err)
		if !ok || e.Attempts != 3 || e.Key != srv.seen()[0].key || !errors.Is(err, io.EOF) {
			t.Fatalf("error %v, want an *Error after 3 attempts wrapping EOF", err)
		}
		if !strings.Contains(err.Error(), "3 attempts") || strings.Contains(err.Error(), e.Key) {
			t.Errorf("message %q: want the count, never the key", err)
		}
	})
}

func TestOptions(t *testing.T) {
	for name, o := range map[string]Option{
		"no methods":          WithMethods(),
		"GET":                 WithMethods("POST", "get"),
		"bad method":          WithMethods("PO ST"),
		"empty key header":    WithKeyHeader(""),
		"bad key header":      WithKeyHeader("Idempotency Key"),
		"bad replay header":   WithReplayHeader("a:b"),
		"nil key func":        WithKeyFunc(nil),
		"0 attempts":          WithMaxAttempts(0),
		"0 budget":            WithBudget(0),
		"0 backoff":           WithBackoff(0, time.Second),
		"cap below base":      WithBackoff(time.Second, time.Millisecond),
		"0 Retry-After cap":   WithRetryAfterCap(0),
		"negative buffer":     WithMaxBufferedBody(-1),
		"nil in-progress":     WithInProgress(nil),
		"nil attempt hook":    WithOnAttempt(nil),
		"negative Retry cap":  WithRetryAfterCap(-time.Second),
		"negative budget":     WithBudget(-time.Second),
		"negative attempts":   WithMaxAttempts(-1),
		"empty method":        WithMethods(""),
		"OPTIONS":             WithMethods("OPTIONS"),
		"negative backoff":    WithBackoff(-time.Second, time.Second),
		"empty replay header": WithReplayHeader(""),
	} {
		if _, err := New(nil, o); !errors.Is(err, ErrBadOption) || !errors.Is(err, idem.ErrBadOption) {
			t.Errorf("%s: error %v, want ErrBadOption, which wraps idem.ErrBadOption", name, err)
		}
		if _, err := NewClient(o); !errors.Is(err, ErrBadOption) {
			t.Errorf("%s: NewClient error %v, want ErrBadOption", name, err)
		}
	}
	tr, err := New(nil, nil, WithMaxAttempts(2), nil)
	if err != nil || tr.cfg.retry.maxAttempts != 2 {
		t.Errorf("nil options: %v", err)
	}
	if _, err := New(tr); !errors.Is(err, ErrBadOption) {
		t.Errorf("a Transport over a Transport: %v, want ErrBadOption", err)
	}
	c, err := NewClient()
	if err != nil || c.Transport.(*Transport).base != http.DefaultTransport || c.Timeout != 0 {
		t.Errorf("NewClient: %+v %v", c, err)
	}
}

func TestInProgressOption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{steps: []step{answer(409, "application/json", `{"code":"BUSY"}`, "1"), conflict("1")}}
		var bodies []string
		tr := newTransport(t, pipeServer(t, srv), WithInProgress(func(resp *http.Response, body []byte) bool {
			bodies = append(bodies, string(body))
			return resp.StatusCode == 409 && strings.Contains(string(body), `"BUSY"`)
		}))
		resp, body, err := post(t, t.Context(), tr, "x")
		if err != nil {
			t.Fatal(err)
		}
		// The custom test replaces the default: idem's problem is final now.
		if resp.StatusCode != 409 || body != idemConflict || len(bodies) != 2 || bodies[0] != `{"code":"BUSY"}` {
			t.Errorf("got %d %q, test saw %q", resp.StatusCode, body, bodies)
		}
	})
}

// TestNilResponseBody survives a base transport that answers without a
// body, as http.Client does.
func TestNilResponseBody(t *testing.T) {
	var n int
	tr := newTransport(t, roundTripFunc(func(r *http.Request) (*http.Response, error) {
		n++
		code := []int{503, 409, 201}[min(n-1, 2)]
		return &http.Response{StatusCode: code, Header: http.Header{"Retry-After": {"0"}}, Request: r}, nil
	}))
	req, _ := http.NewRequest("POST", "http://example.test/orders", strings.NewReader("x"))
	resp, err := tr.RoundTrip(req)
	if err != nil || resp.StatusCode != 409 || n != 2 {
		t.Fatalf("got %v %v after %d attempts, want the 409 (no in-progress body) after 2", resp, err, n)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 0 {
		t.Errorf("body %q %v", b, err)
	}
}

// TestInProgressNotCounted waits out a key held by a crashed server's
// claim: in-progress 409s do not count toward the attempt limit, which
// still bounds the other failures; the budget bounds both.
func TestInProgressNotCounted(t *testing.T) {
	t.Run("a lease longer than the attempts", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var steps []step
			for range 12 {
				steps = append(steps, conflict("1"))
			}
			srv := &fakeServer{steps: append([]step{drop}, steps...)}
			tr := newTransport(t, pipeServer(t, srv))
			start := time.Now()
			resp, body, err := post(t, t.Context(), tr, "x")
			if err != nil {
				t.Fatal(err)
			}
			if r, _ := ResultOf(resp); resp.StatusCode != 201 || body != "created" || r.Attempts != 14 {
				t.Errorf("got %d %q after %d attempts, want 201 after 14", resp.StatusCode, body, r.Attempts)
			}
			if d := time.Since(start); d != 100*time.Millisecond+12*time.Second {
				t.Errorf("took %v, want the backoff and 12 Retry-After waits", d)
			}
		})
	})
	t.Run("failures still count", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			busy := answer(503, "", "down", "0")
			srv := &fakeServer{steps: []step{busy, busy, conflict("0"), conflict("0"), conflict("0"), busy, busy, busy}}
			tr := newTransport(t, pipeServer(t, srv))
			start := time.Now()
			resp, body, err := post(t, t.Context(), tr, "x")
			if err != nil {
				t.Fatal(err)
			}
			if r, _ := ResultOf(resp); resp.StatusCode != 503 || body != "down" || r.Attempts != 8 {
				t.Errorf("got %d %q after %d attempts, want the fifth 503 after 8", resp.StatusCode, body, r.Attempts)
			}
			// Retry-After: 0 on an in-progress 409 still waits the
			// backoff base, three times.
			if d := time.Since(start); d != 300*time.Millisecond {
				t.Errorf("took %v, want 300ms", d)
			}
		})
	})
	t.Run("without Retry-After: the backoff base at least", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := &fakeServer{steps: []step{conflict(""), conflict(""), conflict("")}}
			tr := newTransport(t, pipeServer(t, srv))
			tr.cfg.retry.jitter = func(time.Duration) time.Duration { return 0 } // full jitter's low end
			start := time.Now()
			resp, _, err := post(t, t.Context(), tr, "x")
			if err != nil {
				t.Fatal(err)
			}
			if r, _ := ResultOf(resp); resp.StatusCode != 201 || r.Attempts != 4 {
				t.Errorf("got %d after %d attempts, want 201 after 4", resp.StatusCode, r.Attempts)
			}
			if d := time.Since(start); d != 3*DefaultBackoffBase {
				t.Errorf("took %v, want 3 waits of the backoff base", d)
			}
		})
	})
}
