package idemfiber_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	fiberrecover "github.com/gofiber/fiber/v3/middleware/recover"
	idemfiber "github.com/idemkit/idem/adapters/fiber"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

// testApp is a Fiber app served on loopback, with the middleware on each
// of its routes:
//
//   - POST /orders/:id: 201 {"id":..,"body":..}
//   - POST /status/:code: that status, "status:<code>"
//   - POST /error/:code: returns fiber.NewError(code), or a plain error for 0
//   - POST /stream: 201, a streamed body "streamed"
//   - POST /panic: panics
//   - POST /slow: 200 "slow" once gate is closed
//   - POST /optional (idem.Optional()), POST /skip (idem.Skip()),
//     POST /ttl (idem.TTL(time.Minute)): 201 "<path>"
//   - GET /orders/:id: 200 "get"
//
// Every call of a handler but GET adds 1 to count.
type testApp struct {
	t      *testing.T
	addr   string
	count  atomic.Int64
	gate   chan struct{}
	inSlow chan struct{}
}

func newTestApp(t *testing.T, e *idem.Engine, cfg idemfiber.Config, app *fiber.App, opts ...idem.HTTPOption) *testApp {
	a := &testApp{t: t, gate: make(chan struct{}), inSlow: make(chan struct{}, 8)}
	if app == nil {
		app = fiber.New()
	}
	app.Use(fiberrecover.New())
	mw := cfg.Middleware(e, opts...)
	counted := func(h fiber.Handler) fiber.Handler {
		return func(c fiber.Ctx) error { a.count.Add(1); return h(c) }
	}
	app.Post("/orders/:id", mw, counted(func(c fiber.Ctx) error {
		return c.Status(201).JSON(fiber.Map{"id": c.Params("id"), "body": string(c.Body())})
	}))
	app.Post("/status/:code", mw, counted(func(c fiber.Ctx) error {
		code, _ := strconv.Atoi(c.Params("code"))
		return c.Status(code).SendString("status:" + c.Params("code"))
	}))
	app.Post("/error/:code", mw, counted(func(c fiber.Ctx) error {
		if code, _ := strconv.Atoi(c.Params("code")); code != 0 {
			return fiber.NewError(code, "fiber error "+c.Params("code"))
		}
		return errors.New("plain error")
	}))
	app.Post("/stream", mw, counted(func(c fiber.Ctx) error {
		c.Status(201)
		return c.SendStreamWriter(func(w *bufio.Writer) { w.WriteString("streamed") })
	}))
	app.Post("/panic", mw, counted(func(fiber.Ctx) error { panic("boom") }))
	app.Post("/slow", mw, counted(func(c fiber.Ctx) error {
		a.inSlow <- struct{}{}
		<-a.gate
		return c.SendString("slow")
	}))
	with := func(o idem.RouteOption) []idem.HTTPOption { return append(slices.Clone(opts), o) }
	app.Post("/optional", cfg.Middleware(e, with(idem.Optional())...), counted(func(c fiber.Ctx) error { return c.Status(201).SendString("/optional") }))
	app.Post("/skip", cfg.Middleware(e, with(idem.Skip())...), counted(func(c fiber.Ctx) error { return c.Status(201).SendString("/skip") }))
	app.Post("/ttl", cfg.Middleware(e, with(idem.TTL(time.Minute))...), counted(func(c fiber.Ctx) error { return c.Status(201).SendString("/ttl") }))
	app.Get("/orders/:id", mw, func(c fiber.Ctx) error { return c.SendString("get") })
	a.addr = listen(t, app)
	return a
}

type result struct {
	code   int
	header http.Header
	body   string
}

// do sends a request to the app over its socket; key "" sends no key.
func (a *testApp) do(method, path, key, body string, header ...string) result {
	a.t.Helper()
	r, err := http.NewRequest(method, "http://"+a.addr+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return result{resp.StatusCode, resp.Header, string(b)}
}

func newEngine(t *testing.T, opts ...idem.Option) *idem.Engine {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e, err := idem.New(s, append([]idem.Option{idem.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// step is one request and what its answer must be.
type step struct {
	method, path, key, body string
	header                  []string // name, value pairs
	code                    int
	replayed                bool
	problem                 string // the problem type's name; "" for none
	want                    string // the body, when not ""
	count                   int64  // handler calls after the step
}

func (a *testApp) check(s step) {
	a.t.Helper()
	if s.method == "" {
		s.method = http.MethodPost
	}
	r := a.do(s.method, s.path, s.key, s.body, s.header...)
	if r.code != s.code {
		a.t.Fatalf("%s %s key %q: status %d, want %d; body %q", s.method, s.path, s.key, r.code, s.code, r.body)
	}
	if got := r.header.Get("Idempotent-Replayed") == "true"; got != s.replayed {
		a.t.Errorf("%s %s key %q: replayed %v, want %v", s.method, s.path, s.key, got, s.replayed)
	}
	if s.want != "" && r.body != s.want {
		a.t.Errorf("%s %s key %q: body %q, want %q", s.method, s.path, s.key, r.body, s.want)
	}
	if s.problem != "" {
		var p struct {
			Type   string `json:"type"`
			Status int    `json:"status"`
		}
		if ct := r.header.Get("Content-Type"); ct != "application/problem+json" || r.header.Get("Cache-Control") != "no-store" {
			a.t.Errorf("problem with Content-Type %q, Cache-Control %q", ct, r.header.Get("Cache-Control"))
		}
		if err := json.Unmarshal([]byte(r.body), &p); err != nil || !strings.HasSuffix(p.Type, "#"+s.problem) || p.Status != s.code {
			a.t.Errorf("problem %q, want type #%s and status %d (%v)", r.body, s.problem, s.code, err)
		}
	}
	if n := a.count.Load(); n != s.count {
		a.t.Errorf("after %s %s key %q: handlers ran %d times, want %d", s.method, s.path, s.key, n, s.count)
	}
}

func TestMiddleware(t *testing.T) {
	order := `{"body":"{\"n\":1}","id":"1"}`
	tests := []struct {
		name  string
		opts  []idem.Option
		http  []idem.HTTPOption
		cfg   idemfiber.Config
		steps []step
	}{
		{name: "first request runs, the retry is replayed", steps: []step{
			{path: "/orders/1", key: "k", body: `{"n":1}`, code: 201, want: order, count: 1},
			{path: "/orders/1", key: "k", body: `{"n":1}`, code: 201, want: order, replayed: true, count: 1},
			{path: "/orders/1", key: `"k"`, body: `{"n":1}`, code: 201, want: order, replayed: true, count: 1},
		}},
		{name: "a different body is 422", steps: []step{
			{path: "/orders/1", key: "k", body: `{"n":1}`, code: 201, count: 1},
			{path: "/orders/1", key: "k", body: `{"n":2}`, code: 422, problem: "key-reused", count: 1},
			{path: "/orders/2", key: "k", body: `{"n":1}`, code: 422, problem: "key-reused", count: 1},
			{path: "/orders/1?x=1", key: "k", body: `{"n":1}`, code: 422, problem: "key-reused", count: 1},
		}},
		{name: "another route or method is another scope", steps: []step{
			{path: "/orders/1", key: "k", code: 201, count: 1},
			{path: "/optional", key: "k", code: 201, count: 2},
			{method: "PATCH", path: "/orders/1", key: "k", code: 405, count: 2},
		}},
		{name: "missing and invalid keys are 400", steps: []step{
			{path: "/orders/1", code: 400, problem: "missing-key"},
			{path: "/orders/1", key: "a b", code: 400, problem: "invalid-key"},
			{path: "/orders/1", key: `"a", "b"`, code: 400, problem: "invalid-key"},
			{path: "/orders/1", key: strings.Repeat("k", 256), code: 400, problem: "invalid-key"},
			{path: "/orders/1", key: "k", header: []string{"Idempotency-Key", "k"}, code: 400, problem: "invalid-key"},
		}},
		{name: "unprotected methods pass", steps: []step{
			{method: "GET", path: "/orders/1", key: "not a key", code: 200, want: "get"},
		}},
		{name: "optional route runs without a key, protects with one", steps: []step{
			{path: "/optional", code: 201, count: 1},
			{path: "/optional", code: 201, count: 2},
			{path: "/optional", key: "o", code: 201, count: 3},
			{path: "/optional", key: "o", code: 201, replayed: true, count: 3},
		}},
		{name: "skipped route is never protected", steps: []step{
			{path: "/skip", key: "s", code: 201, count: 1},
			{path: "/skip", key: "s", code: 201, count: 2},
			{path: "/skip", key: "a b", code: 201, count: 3},
		}},
		{name: "Optional for every route", http: []idem.HTTPOption{idem.Optional()}, steps: []step{
			{path: "/orders/1", code: 201, count: 1},
			{path: "/orders/1", code: 201, count: 2},
		}},
		{name: "5xx, 408 and 429 release the key; other statuses are stored", steps: []step{
			{path: "/status/500", key: "a", code: 500, count: 1},
			{path: "/status/500", key: "a", code: 500, count: 2},
			{path: "/status/503", key: "b", code: 503, count: 3},
			{path: "/status/503", key: "b", code: 503, count: 4},
			{path: "/status/429", key: "c", code: 429, count: 5},
			{path: "/status/429", key: "c", code: 429, count: 6},
			{path: "/status/404", key: "d", code: 404, want: "status:404", count: 7},
			{path: "/status/404", key: "d", code: 404, want: "status:404", replayed: true, count: 7},
			{path: "/status/204", key: "e", code: 204, count: 8},
			{path: "/status/204", key: "e", code: 204, replayed: true, count: 8},
		}},
		{name: "a panic releases the key", steps: []step{
			{path: "/panic", key: "p", code: 500, count: 1},
			{path: "/panic", key: "p", code: 500, count: 2},
		}},
		{name: "returned errors are rendered by the app's error handler inside", steps: []step{
			{path: "/error/409", key: "a", code: 409, want: "fiber error 409", count: 1},
			{path: "/error/409", key: "a", code: 409, want: "fiber error 409", replayed: true, count: 1},
			{path: "/error/0", key: "b", code: 500, count: 2},
			{path: "/error/0", key: "b", code: 500, count: 3},
			{path: "/error/503", key: "c", code: 503, count: 4},
			{path: "/error/503", key: "c", code: 503, count: 5},
		}},
		{name: "a streamed body is not kept", steps: []step{
			{path: "/stream", key: "s", code: 201, want: "streamed", count: 1},
			{path: "/stream", key: "s", code: 201, replayed: true, count: 1},
		}},
		{name: "a body over the cap is 413", http: []idem.HTTPOption{idem.WithMaxRequestBody(8)}, steps: []step{
			{path: "/orders/1", key: "big", body: "123456789", code: 413, problem: "body-too-large"},
			{path: "/orders/1", key: "big", body: "12345678", code: 201, count: 1},
		}},
		{name: "JSON fingerprint", http: []idem.HTTPOption{idem.WithJSONFingerprint()}, steps: []step{
			{path: "/orders/1", key: "j", body: `{"a":1,"b":2}`, code: 201, count: 1},
			{path: "/orders/1", key: "j", body: `{ "b":2, "a":1 }`, code: 201, replayed: true, count: 1},
			{path: "/orders/1", key: "j", body: `{"a":1,"b":3}`, code: 422, problem: "key-reused", count: 1},
			{path: "/orders/1", key: "x", body: `{"a":`, code: 400, problem: "invalid-json", count: 1},
		}},
		{name: "Config.Fingerprint", cfg: idemfiber.Config{Fingerprint: func(c fiber.Ctx, _ []byte) string { return c.Path() }}, steps: []step{
			{path: "/orders/1", key: "f", body: "one", code: 201, count: 1},
			{path: "/orders/1", key: "f", body: "two", code: 201, replayed: true, count: 1},
			{path: "/orders/2", key: "f", body: "one", code: 422, problem: "key-reused", count: 1},
		}},
		{name: "Config.Namespace scopes keys", cfg: idemfiber.Config{Namespace: func(c fiber.Ctx) string { return c.Get("X-Tenant") }}, steps: []step{
			{path: "/orders/1", key: "n", body: "a", header: []string{"X-Tenant", "alice"}, code: 201, count: 1},
			{path: "/orders/1", key: "n", body: "b", header: []string{"X-Tenant", "bob"}, code: 201, count: 2},
			{path: "/orders/1", key: "n", body: "a", header: []string{"X-Tenant", "alice"}, code: 201, replayed: true, count: 2},
			{path: "/orders/1", key: "n", body: "c", code: 201, count: 3},
		}},
		{name: "a required namespace is 403 without one", opts: []idem.Option{idem.WithRequiredNamespace()},
			cfg: idemfiber.Config{Namespace: func(c fiber.Ctx) string { return c.Get("X-Tenant") }}, steps: []step{
				{path: "/orders/1", key: "n", code: 403, problem: "namespace-required"},
				{path: "/orders/1", key: "n", header: []string{"X-Tenant", "alice"}, code: 201, count: 1},
			}},
		{name: "problem type base", http: []idem.HTTPOption{idem.WithProblemTypeBase("https://example.com/p#")}, steps: []step{
			{path: "/orders/1", code: 400, problem: "missing-key"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newTestApp(t, newEngine(t, tc.opts...), tc.cfg, nil, tc.http...)
			for _, s := range tc.steps {
				a.check(s)
			}
		})
	}
}

func TestBodyTooLargeProblem(t *testing.T) {
	a := newTestApp(t, newEngine(t), idemfiber.Config{}, nil, idem.WithMaxRequestBody(8), idem.WithProblemTypeBase("https://example.com/p/"))
	r := a.do("POST", "/orders/1", "k", "123456789")
	var p map[string]any
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"type": "https://example.com/p/body-too-large", "title": "Request body too large", "status": 413.0,
		"detail": "The request body is larger than 8 bytes."}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("%s = %v, want %v", k, p[k], v)
		}
	}
}

func TestStreamReplayOmitsBody(t *testing.T) {
	a := newTestApp(t, newEngine(t), idemfiber.Config{}, nil)
	a.do("POST", "/stream", "s", "")
	r := a.do("POST", "/stream", "s", "")
	if r.code != 201 || r.body != "" || r.header.Get(idem.HeaderBodyOmitted) != "true" {
		t.Errorf("replay of a stream: %d %q, %s %q", r.code, r.body, idem.HeaderBodyOmitted, r.header.Get(idem.HeaderBodyOmitted))
	}
}

func TestInFlightConflict(t *testing.T) {
	a := newTestApp(t, newEngine(t), idemfiber.Config{}, nil)
	first := make(chan result, 1)
	go func() { first <- a.do("POST", "/slow", "busy", "") }()
	<-a.inSlow
	a.check(step{path: "/slow", key: "busy", code: 409, problem: "conflict", count: 1})
	if r := a.do("POST", "/slow", "busy", ""); r.header.Get("Retry-After") == "" {
		t.Error("409 without Retry-After")
	}
	close(a.gate)
	if r := <-first; r.code != 200 || r.body != "slow" {
		t.Fatalf("first: %d %q", r.code, r.body)
	}
	a.check(step{path: "/slow", key: "busy", code: 200, want: "slow", replayed: true, count: 1})
}

func TestConcurrentDuplicates(t *testing.T) {
	a := newTestApp(t, newEngine(t), idemfiber.Config{}, nil)
	close(a.gate)
	var wg sync.WaitGroup
	codes := make([]int, 16)
	for i := range codes {
		wg.Go(func() {
			r := a.do("POST", "/slow", "dup", "")
			codes[i] = r.code
		})
	}
	wg.Wait()
	if n := a.count.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
	for i, c := range codes {
		if c != 200 && c != 409 {
			t.Errorf("duplicate %d: %d, want 200 or 409", i, c)
		}
	}
}

func TestRouteTTL(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	a := newTestApp(t, newEngine(t, idem.WithClock(clock), idem.WithRetention(time.Hour)), idemfiber.Config{}, nil)
	a.check(step{path: "/ttl", key: "t", code: 201, count: 1})
	a.check(step{path: "/orders/1", key: "t", code: 201, count: 2})
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	a.check(step{path: "/ttl", key: "t", code: 201, count: 3})                      // TTL(time.Minute) ran out
	a.check(step{path: "/orders/1", key: "t", code: 201, replayed: true, count: 3}) // the engine's hour did not
}

func TestRefusedOptions(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	e, err := idem.New(s)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opt  idem.HTTPOption
		want string
	}{
		{"WithNamespace", idem.WithNamespace(func(*http.Request) string { return "" }), "WithNamespace"},
		{"WithFingerprint", idem.WithFingerprint(func(*http.Request, []byte) string { return "" }), "WithFingerprint"},
		{"WithKeyField", idem.WithKeyField("/key"), "WithKeyField"},
		{"RouteFunc", idem.RouteFunc(func(*http.Request) string { return "/" }), "RouteFunc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, idemfiber.ErrBadOption) || !errors.Is(err, idem.ErrBadOption) || !strings.Contains(err.Error(), tc.want) ||
					!strings.Contains(err.Error(), "idemfiber.Config") {
					t.Errorf("panic %v, want an ErrBadOption naming %s and idemfiber.Config", err, tc.want)
				}
			}()
			idemfiber.Middleware(e, tc.opt)
		})
	}
	t.Run("nil engine", func(t *testing.T) {
		defer func() {
			if err, _ := recover().(error); !errors.Is(err, idemfiber.ErrBadOption) {
				t.Errorf("panic %v, want ErrBadOption", err)
			}
		}()
		idemfiber.Middleware(nil)
	})
}

// TestMounting: on a route, on a group's route and twice on one route the
// middleware sees the route; with app.Use or a group's handlers it cannot,
// and fails closed.
func TestMounting(t *testing.T) {
	e := newEngine(t)
	mw := idemfiber.Middleware(e, idem.ForRoute("POST", "/api/optional", idem.Optional()))
	var count atomic.Int64
	h := func(c fiber.Ctx) error { count.Add(1); return c.Status(201).SendString(c.Route().Path) }
	app := fiber.New()
	app.Post("/direct", mw, h)
	app.Group("/api").Post("/optional", mw, h)
	app.Post("/twice", mw, idemfiber.Middleware(e, idem.Skip()), h)
	app.Group("/used", mw).Post("/orders", h)
	used := fiber.New()
	used.Use(mw)
	used.Post("/orders", h)
	used.Get("/orders", h)
	a := &testApp{t: t, addr: listen(t, app)}
	u := &testApp{t: t, addr: listen(t, used)}
	for _, tc := range []struct {
		a    *testApp
		path string
		key  string
		code int
		body string
		runs int64
	}{
		{a, "/direct", "k", 201, "/direct", 1},
		{a, "/direct", "k", 201, "/direct", 1},
		{a, "/api/optional", "", 201, "/api/optional", 2},
		{a, "/twice", "k", 201, "/twice", 3},
		{a, "/twice", "k", 201, "/twice", 3}, // the outer policy applies: protected
		{a, "/twice", "", 400, "", 3},
		{a, "/used/orders", "k", 500, "", 3},
		{u, "/orders", "k", 500, "", 3},
		{u, "/nowhere", "k", 500, "", 3},
	} {
		r := tc.a.do("POST", tc.path, tc.key, "")
		if r.code != tc.code || tc.body != "" && r.body != tc.body || count.Load() != tc.runs {
			t.Errorf("POST %s key %q: %d %q, %d runs; want %d %q, %d runs", tc.path, tc.key, r.code, r.body, count.Load(), tc.code, tc.body, tc.runs)
		}
		if tc.code == 500 && !strings.Contains(r.body, "route-unknown") {
			t.Errorf("POST %s: %q, want the route-unknown problem", tc.path, r.body)
		}
	}
	if r := u.do("GET", "/orders", "k", ""); r.code != 201 || r.body != "/orders" {
		t.Errorf("GET through app.Use: %d %q, want the handler's 201", r.code, r.body)
	}
}

// TestOuterHeaders: headers that middleware outside set before the chain
// are the current request's, and are not stored.
func TestOuterHeaders(t *testing.T) {
	app := fiber.New()
	n := 0
	app.Use(func(c fiber.Ctx) error { n++; c.Set("X-Request-Id", strconv.Itoa(n)); return c.Next() })
	a := newTestApp(t, newEngine(t), idemfiber.Config{}, app)
	r1 := a.do("POST", "/orders/1", "h", "")
	r2 := a.do("POST", "/orders/1", "h", "")
	if r1.header.Get("X-Request-Id") != "1" || r2.header.Get("X-Request-Id") != "2" || r2.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("X-Request-Id %q then %q (replayed %q), want 1 then 2", r1.header.Get("X-Request-Id"), r2.header.Get("X-Request-Id"), r2.header.Get("Idempotent-Replayed"))
	}
	if ct := r2.header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("replayed Content-Type %q", ct)
	}
}

func TestCheckRoutes(t *testing.T) {
	app := fiber.New()
	app.Post("/orders/:id", func(c fiber.Ctx) error { return nil })
	app.Group("/api").Post("/search", func(c fiber.Ctx) error { return nil })
	if err := idemfiber.CheckRoutes(app, idem.ForRoute("POST", "/orders/:id", idem.TTL(time.Hour)), idem.ForRoute("post", "/api/search", idem.Optional())); err != nil {
		t.Errorf("declared routes: %v", err)
	}
	err := idemfiber.CheckRoutes(app, idem.ForRoute("POST", "/orders/{id}", idem.Optional()))
	if !errors.Is(err, idem.ErrBadOption) || !strings.Contains(err.Error(), "POST /orders/{id}") {
		t.Errorf("typo: %v, want an ErrBadOption naming POST /orders/{id}", err)
	}
}

// TestStreamedRequestBody: with Fiber's StreamRequestBody the body is read
// from its stream up to the cap, and the handler gets it whole.
func TestStreamedRequestBody(t *testing.T) {
	a := newTestApp(t, newEngine(t), idemfiber.Config{}, fiber.New(fiber.Config{StreamRequestBody: true}), idem.WithMaxRequestBody(64<<10))
	for _, tc := range []struct {
		name string
		size int
		code int
	}{{"under the cap", 64 << 10, 201}, {"over the cap", 64<<10 + 1, 413}, {"problem before the body is read", 64 << 10, 400}} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Repeat("s", tc.size)
			r, err := http.NewRequest("POST", "http://"+a.addr+"/orders/1", io.MultiReader(strings.NewReader(body))) // chunked
			if err != nil {
				t.Fatal(err)
			}
			r.Header.Set("Idempotency-Key", strconv.Itoa(tc.size)+strconv.Itoa(tc.code))
			if tc.code == 400 {
				r.Header.Set("Idempotency-Key", "a b")
			}
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got struct{ Body string }
			json.NewDecoder(resp.Body).Decode(&got)
			if resp.StatusCode != tc.code || tc.code == 201 && got.Body != body {
				t.Errorf("%d, handler saw %d bytes; want %d with the whole body", resp.StatusCode, len(got.Body), tc.code)
			}
		})
	}
}

// TestHooks: what WithRedact keeps is what a replay sends, and
// WithReplayHook's changes reach the replay, whose marker is set after it.
func TestHooks(t *testing.T) {
	e := newEngine(t,
		idem.WithRedact(func(_ context.Context, r idem.Response) idem.Response {
			r.Body = bytes.ReplaceAll(r.Body, []byte("secret"), []byte("******"))
			return r
		}),
		idem.WithReplayHook(func(_ context.Context, r *idem.Response, created time.Time) {
			r.Header.Set("Idempotent-Replayed", "hooked") // overwritten by the marker
			r.Header.Set("X-Replayed-At", created.UTC().Format(http.TimeFormat))
		}))
	a := newTestApp(t, e, idemfiber.Config{}, nil)
	first := a.do("POST", "/orders/1", "h", "secret")
	replay := a.do("POST", "/orders/1", "h", "secret")
	if !strings.Contains(first.body, "secret") || strings.Contains(replay.body, "secret") || !strings.Contains(replay.body, "******") {
		t.Errorf("first %q, replay %q: want the full body first and the redacted one replayed", first.body, replay.body)
	}
	if replay.header.Get("X-Replayed-At") == "" || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay headers %v: want X-Replayed-At and the marker true", replay.header)
	}
}

// A response a compressor inside idem encoded is decoded for a retry that
// does not accept its coding, or refused with 406 when idem cannot decode
// it, as the net/http middleware does.
func TestReplayContentCoding(t *testing.T) {
	app := fiber.New()
	app.Use(fiberrecover.New())
	mw := idemfiber.Middleware(newEngine(t))
	encoded := func(coding string, body []byte) fiber.Handler {
		return func(c fiber.Ctx) error {
			c.Set("Content-Encoding", coding)
			return c.Status(201).Send(body)
		}
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("order 1"))
	zw.Close()
	app.Post("/gzip", mw, encoded("gzip", gz.Bytes()))
	app.Post("/br", mw, encoded("br", []byte("not really brotli")))
	a := &testApp{t: t, addr: listen(t, app)}
	// Go's client asks for gzip and decodes it itself unless told not to.
	a.check(step{path: "/gzip", key: "g", header: []string{"Accept-Encoding", "gzip"}, code: 201})
	r := a.do("POST", "/gzip", "g", "", "Accept-Encoding", "identity")
	if r.code != 201 || r.body != "order 1" || r.header.Get("Content-Encoding") != "" || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("gzip replay to a client without gzip: %d %q %v", r.code, r.body, r.header)
	}
	a.check(step{path: "/br", key: "b", header: []string{"Accept-Encoding", "br"}, code: 201})
	a.check(step{path: "/br", key: "b", header: []string{"Accept-Encoding", "identity"}, code: 406, problem: "not-acceptable"})
}
