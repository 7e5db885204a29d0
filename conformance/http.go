package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// Harness builds what RunHTTP tests: a fresh store per scenario and the
// fixture mounted through a real router.
type Harness struct {
	// NewStore returns a fresh, empty store for one scenario; register its
	// cleanup with t.Cleanup.
	NewStore func(t *testing.T) store.Store
	// Handler mounts every route of f.Routes() on the router under test,
	// the protected ones behind the idempotency middleware built from e
	// (with each route's Options, once at the top with f.GlobalOptions(),
	// or on a group with f.HTTPOptions()),
	// the framework's panic recovery outermost, and returns the router.
	Handler func(t *testing.T, e *idem.Engine, f *Fixture) http.Handler
	// OwnNamespace, when set, leaves idem.WithNamespace(Namespace) out of
	// the fixture's HTTP options, for adapters that refuse options that
	// need a *http.Request (idemfiber): Handler then scopes
	// keys by the same namespace with the adapter's own option, the
	// BearerName of the Authorization header.
	OwnNamespace bool
}

// BearerName returns the name in an Authorization header value of the
// form "Bearer <name>", or "": what Namespace returns, for adapters whose
// request is not a *http.Request (Harness.OwnNamespace).
func BearerName(authorization string) string {
	return Namespace(&http.Request{Header: http.Header{"Authorization": {authorization}}})
}

// RunHTTP runs the behaviour table of the engine as HTTP scenarios against
// the fixture routes mounted by h. Each scenario gets a fresh store, a
// fresh fixture and an engine configured for it; requests go through
// h.Handler in-process.
func RunHTTP(t *testing.T, h Harness) {
	t.Helper()
	if h.NewStore == nil || h.Handler == nil {
		t.Fatal("conformance: Harness needs NewStore and Handler")
	}
	for _, sc := range httpScenarios {
		t.Run(sc.name, func(t *testing.T) {
			v := newEnv(t, h, sc)
			sc.run(t, v)
		})
	}
}

type scenario struct {
	name  string
	opts  func(v *env) []idem.Option
	http  []idem.HTTPOption // the middleware's, before the fixture's routes' own
	fails bool              // the engine gets a store wrapper that can be made to fail
	run   func(t *testing.T, v *env)
}

// env is one scenario's world.
type env struct {
	t     *testing.T
	e     *idem.Engine
	h     http.Handler
	f     *Fixture
	store store.Store
	clock *manualClock
	fail  *failingStore
}

func newEnv(t *testing.T, h Harness, sc scenario) *env {
	var httpOpts []idem.HTTPOption
	if !h.OwnNamespace {
		httpOpts = append(httpOpts, idem.WithNamespace(Namespace))
	}
	v := &env{t: t, f: NewFixture(append(httpOpts, sc.http...)...), clock: &manualClock{now: time.Now().Truncate(time.Millisecond)}}
	v.store = h.NewStore(t)
	v.fail = &failingStore{Store: v.store}
	all := []idem.Option{idem.WithLogger(slog.New(slog.DiscardHandler))}
	if sc.opts != nil {
		all = append(all, sc.opts(v)...)
	}
	// The engine sees the store itself, with all its capabilities
	// (exactly-once transactions included), except in the scenarios that
	// make it fail.
	var s store.Store = v.store
	if sc.fails {
		s = v.fail
	}
	e, err := idem.New(s, all...)
	if err != nil {
		t.Fatalf("idem.New: %v", err)
	}
	v.e, v.h = e, h.Handler(t, e, v.f)
	return v
}

type req struct {
	method, target string
	key            string // "" sends no key header
	body           string
	header         http.Header
	chunked        bool // no Content-Length
}

type resp struct {
	code   int
	header http.Header
	body   string
}

func (r req) build() *http.Request {
	var body io.Reader = strings.NewReader(r.body)
	if r.chunked {
		body = io.MultiReader(strings.NewReader(r.body))
	}
	hr := httptest.NewRequest(r.method, r.target, body)
	if r.chunked {
		hr.ContentLength = -1
	}
	if r.key != "" {
		hr.Header.Set("Idempotency-Key", r.key)
	}
	for k, vs := range r.header {
		for _, x := range vs {
			hr.Header.Add(k, x)
		}
	}
	return hr
}

func (v *env) serve(r req) resp {
	w := httptest.NewRecorder()
	v.h.ServeHTTP(w, r.build())
	return resp{code: w.Code, header: w.Result().Header, body: w.Body.String()}
}

func (v *env) do(r req) resp {
	v.t.Helper()
	return v.serve(r)
}

func (v *env) post(target, key, body string) resp {
	v.t.Helper()
	return v.do(req{method: http.MethodPost, target: target, key: key, body: body})
}

func (v *env) wantCount(n int64) {
	v.t.Helper()
	if got := v.f.Count(); got != n {
		v.t.Errorf("handler ran %d times, want %d", got, n)
	}
}

func wantStatus(t *testing.T, r resp, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("status %d, want %d; body %q", r.code, code, r.body)
	}
}

func wantFresh(t *testing.T, r resp, code int, body string) {
	t.Helper()
	wantStatus(t, r, code)
	if r.body != body {
		t.Errorf("body %q, want %q", r.body, body)
	}
	if got := r.header.Get("Idempotent-Replayed"); got != "" {
		t.Errorf("a first response carries Idempotent-Replayed: %q", got)
	}
}

func wantReplay(t *testing.T, r resp, code int, body string) {
	t.Helper()
	wantStatus(t, r, code)
	if r.body != body {
		t.Errorf("replayed body %q, want %q", r.body, body)
	}
	if got := r.header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("Idempotent-Replayed = %q, want true", got)
	}
	if cl := r.header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(r.body)) {
		t.Errorf("Content-Length %s, body has %d bytes", cl, len(r.body))
	}
}

// wantProblem checks an RFC 9457 answer from the engine.
func wantProblem(t *testing.T, r resp, code int) map[string]any {
	t.Helper()
	wantStatus(t, r, code)
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if cc := r.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control %q, want no-store", cc)
	}
	if r.header.Get("Idempotent-Replayed") != "" {
		t.Error("a problem response is marked as replayed")
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("problem body is not JSON: %v: %q", err, r.body)
	}
	if s, _ := p["status"].(float64); int(s) != code {
		t.Errorf("problem status %v, want %d", p["status"], code)
	}
	for _, f := range []string{"type", "title"} {
		if s, _ := p[f].(string); s == "" {
			t.Errorf("problem has no %q: %q", f, r.body)
		}
	}
	return p
}

func wantRetryAfter(t *testing.T, r resp) {
	t.Helper()
	n, err := strconv.Atoi(r.header.Get("Retry-After"))
	if err != nil || n < 1 {
		t.Errorf("Retry-After %q, want whole seconds >= 1", r.header.Get("Retry-After"))
	}
}

// waitCount waits until the handler ran n times (a request is inside it).
func (v *env) waitCount(n int64) {
	v.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for v.f.Count() < n {
		if time.Now().After(deadline) {
			v.t.Fatalf("handler count stayed at %d, want %d", v.f.Count(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// async sends r in a goroutine; the returned function waits for it.
func (v *env) async(r req) func() resp {
	ch := make(chan resp, 1)
	go func() { ch <- v.serve(r) }()
	return func() resp { return <-ch }
}

// retryingWriter sends a retry the first time the response under test
// writes its status or a byte.
type retryingWriter struct {
	*httptest.ResponseRecorder
	retry   func() resp
	fired   bool
	retried resp
}

func (w *retryingWriter) fire() {
	if !w.fired {
		w.fired = true
		w.retried = w.retry()
	}
}

func (w *retryingWriter) WriteHeader(code int) { w.fire(); w.ResponseRecorder.WriteHeader(code) }

func (w *retryingWriter) Write(p []byte) (int, error) { w.fire(); return w.ResponseRecorder.Write(p) }

type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

var errStoreDown = errors.New("conformance: store is down")

// failingStore wraps a store and fails every call while down is set, and
// Complete alone while completeDown is.
type failingStore struct {
	store.Store
	mu           sync.Mutex
	down         bool
	completeDown bool
}

func (s *failingStore) setDown(b bool)         { s.mu.Lock(); s.down = b; s.mu.Unlock() }
func (s *failingStore) setCompleteDown(b bool) { s.mu.Lock(); s.completeDown = b; s.mu.Unlock() }
func (s *failingStore) isDown() bool           { s.mu.Lock(); defer s.mu.Unlock(); return s.down }

func (s *failingStore) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	if s.isDown() {
		return store.ClaimResult{}, errStoreDown
	}
	return s.Store.Claim(ctx, c)
}

func (s *failingStore) Complete(ctx context.Context, h store.Hold, c store.Completion) error {
	s.mu.Lock()
	down := s.down || s.completeDown
	s.mu.Unlock()
	if down {
		return errStoreDown
	}
	return s.Store.Complete(ctx, h, c)
}

// Watch passes the store's Notifier through, so wait mode is tested with
// notifications when the store has them.
func (s *failingStore) Watch(ctx context.Context, r store.Ref) (<-chan struct{}, func(), error) {
	if n, ok := s.Store.(store.Notifier); ok {
		return n.Watch(ctx, r)
	}
	return nil, nil, errors.New("conformance: store has no Notifier")
}

func withOpts(opts ...idem.Option) func(*env) []idem.Option {
	return func(*env) []idem.Option { return opts }
}

var httpScenarios = []scenario{
	{name: "first request runs and the retry is replayed", run: testReplay},
	{name: "PATCH is protected too", run: testPatch},
	{name: "binary body reaches the handler unchanged and is replayed exactly", run: testBinaryBody},
	{name: "body without Content-Length", run: testChunkedBody},
	{name: "different body with the same key is 422 and the record is untouched", run: testMismatchBody},
	{name: "different query with the same key is 422", run: testMismatchQuery},
	{name: "same route template, different path is 422", run: testMismatchPath},
	{name: "different routes are different scopes", run: testScopeRoute},
	{name: "different methods are different scopes", run: testScopeMethod},
	{name: "different namespaces are different scopes", run: testScopeNamespace},
	{name: "quoted key is the same key as the bare one", run: testQuotedKey},
	{name: "missing key is 400 and the handler does not run", run: testMissingKey},
	{name: "optional key: no key runs every time", run: testOptionalKey},
	{name: "invalid keys are 400 and the handler does not run", run: testInvalidKeys},
	{name: "255-character key is accepted", run: testLongestKey},
	{name: "safe methods are never touched", run: testSafeMethods},
	{name: "unmatched routes pass through untouched", run: testUnmatchedRoutes},
	{name: "5xx releases the key", run: testRelease5xx},
	{name: "429 releases the key", run: testRelease429},
	{name: "2xx, 3xx and other 4xx are stored", run: testStoredStatuses},
	{name: "panic releases the key", run: testPanic},
	{name: "Set-Cookie is never replayed", run: testSetCookie},
	{name: "in-progress duplicate is 409 with Retry-After", run: testConflict},
	{name: "in-progress duplicate with another body is 422", run: testConflictMismatch},
	{name: "wait mode replays once the first finishes", opts: withOpts(idem.WithWait(5 * time.Second)), run: testWaitReplays},
	{name: "wait mode gives up with 409", opts: withOpts(idem.WithWait(50 * time.Millisecond)), run: testWaitGivesUp},
	{name: "concurrent duplicates run the handler once", run: testConcurrentDuplicates},
	{name: "an instant retry is replayed, never 409", run: testInstantRetry},
	{name: "request body over the cap is 413", http: []idem.HTTPOption{idem.WithMaxRequestBody(1024)}, run: testRequestCap},
	{name: "response over the cap is sent in full and replayed without its body", http: []idem.HTTPOption{idem.WithMaxResponseBody(1024)}, run: testResponseCap},
	{name: "store failure fails closed with 503", fails: true, run: testFailClosed},
	{name: "a completion the store missed lands once it is back, and the retry replays", fails: true, run: testLateCompletion},
	{name: "store failure with fail open runs unprotected", fails: true, opts: withOpts(idem.WithFailOpen()), run: testFailOpen},
	{name: "completed record expires after the retention", opts: func(v *env) []idem.Option {
		return []idem.Option{idem.WithClock(v.clock.Now), idem.WithRetention(time.Hour)}
	}, run: testRetention},
	{name: "abandoned claim blocks until its lease ends, then is taken over", opts: func(v *env) []idem.Option {
		return []idem.Option{idem.WithClock(v.clock.Now), idem.WithLease(time.Minute)}
	}, run: testAbandonedClaim},
	{name: "admin handler inspects a running claim and evicts it", run: testAdminHandler},
	{name: "problem type URL is configurable", http: []idem.HTTPOption{idem.WithProblemTypeBase("https://example.com/problems/")}, run: testProblemTypeBase},
	{name: "replay header name is configurable", http: []idem.HTTPOption{idem.WithReplayHeader("X-Replayed")}, run: testReplayHeader},
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(fmt.Sprintf("conformance: %q is not a number", s))
	}
	return n
}

// testReplay: first request runs and the retry is replayed.
func testReplay(t *testing.T, v *env) {
	body := `{"amount":42}`
	r1 := v.do(req{method: "POST", target: "/echo", key: "k1", body: body, header: http.Header{"Content-Type": {"application/json"}}})
	wantFresh(t, r1, 201, body)
	r2 := v.do(req{method: "POST", target: "/echo", key: "k1", body: body, header: http.Header{"Content-Type": {"application/json"}}})
	wantReplay(t, r2, 201, body)
	if ct := r2.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("replayed Content-Type %q, want application/json", ct)
	}
	if cl := r2.header.Get("Content-Length"); cl != strconv.Itoa(len(body)) {
		t.Errorf("replayed Content-Length %q, want %d", cl, len(body))
	}
	v.wantCount(1)
}

// testPatch: PATCH is protected too.
func testPatch(t *testing.T, v *env) {
	wantFresh(t, v.do(req{method: "PATCH", target: "/echo", key: "p", body: "x"}), 200, "x")
	wantReplay(t, v.do(req{method: "PATCH", target: "/echo", key: "p", body: "x"}), 200, "x")
	v.wantCount(1)
}

// testBinaryBody: binary body reaches the handler unchanged and is replayed exactly.
func testBinaryBody(t *testing.T, v *env) {
	body := string([]byte{0, 1, 2, 0xff, 0xfe, '\n', 0x80})
	wantFresh(t, v.post("/echo", "bin", body), 201, body)
	wantReplay(t, v.post("/echo", "bin", body), 201, body)
	v.wantCount(1)
}

// testChunkedBody: body without Content-Length.
func testChunkedBody(t *testing.T, v *env) {
	wantFresh(t, v.do(req{method: "POST", target: "/echo", key: "c", body: "chunked", chunked: true}), 201, "chunked")
	wantReplay(t, v.do(req{method: "POST", target: "/echo", key: "c", body: "chunked", chunked: true}), 201, "chunked")
	v.wantCount(1)
}

// testMismatchBody: different body with the same key is 422 and the record is untouched.
func testMismatchBody(t *testing.T, v *env) {
	wantFresh(t, v.post("/echo", "m", "one"), 201, "one")
	wantProblem(t, v.post("/echo", "m", "two"), 422)
	wantReplay(t, v.post("/echo", "m", "one"), 201, "one")
	v.wantCount(1)
}

// testMismatchQuery: different query with the same key is 422.
func testMismatchQuery(t *testing.T, v *env) {
	wantFresh(t, v.post("/slow?ms=1", "q", ""), 200, "slept:1")
	wantProblem(t, v.post("/slow?ms=2", "q", ""), 422)
	v.wantCount(1)
}

// testMismatchPath: same route template, different path is 422.
func testMismatchPath(t *testing.T, v *env) {
	wantFresh(t, v.post("/items/1", "i", ""), 201, "item:1")
	wantProblem(t, v.post("/items/2", "i", ""), 422)
	v.wantCount(1)
}

// testScopeRoute: different routes are different scopes.
func testScopeRoute(t *testing.T, v *env) {
	wantFresh(t, v.post("/echo", "s", ""), 201, "")
	wantFresh(t, v.post("/items/1", "s", ""), 201, "item:1")
	v.wantCount(2)
}

// testScopeMethod: different methods are different scopes.
func testScopeMethod(t *testing.T, v *env) {
	wantFresh(t, v.do(req{method: "POST", target: "/echo", key: "pm", body: "a"}), 201, "a")
	wantFresh(t, v.do(req{method: "PATCH", target: "/echo", key: "pm", body: "a"}), 200, "a")
	v.wantCount(2)
}

// testScopeNamespace: different namespaces are different scopes.
func testScopeNamespace(t *testing.T, v *env) {
	alice := http.Header{"Authorization": {"Bearer alice"}}
	bob := http.Header{"Authorization": {"Bearer bob"}}
	wantFresh(t, v.do(req{method: "POST", target: "/echo", key: "n", body: "a", header: alice}), 201, "a")
	wantFresh(t, v.do(req{method: "POST", target: "/echo", key: "n", body: "b", header: bob}), 201, "b")
	wantReplay(t, v.do(req{method: "POST", target: "/echo", key: "n", body: "a", header: alice}), 201, "a")
	wantFresh(t, v.post("/echo", "n", "global"), 201, "global")
	v.wantCount(3)
}

// testQuotedKey: quoted key is the same key as the bare one.
func testQuotedKey(t *testing.T, v *env) {
	wantFresh(t, v.post("/echo", `"abc"`, "x"), 201, "x")
	wantReplay(t, v.post("/echo", "abc", "x"), 201, "x")
	wantReplay(t, v.post("/echo", ` "abc" `, "x"), 201, "x")
	v.wantCount(1)
}

// testMissingKey: missing key is 400 and the handler does not run.
func testMissingKey(t *testing.T, v *env) {
	wantProblem(t, v.post("/echo", "", "x"), 400)
	v.wantCount(0)
}

// testOptionalKey: optional key: no key runs every time.
func testOptionalKey(t *testing.T, v *env) {
	wantFresh(t, v.post("/optional", "", ""), 201, "optional")
	wantFresh(t, v.post("/optional", "", ""), 201, "optional")
	wantFresh(t, v.post("/optional", "o", ""), 201, "optional")
	wantReplay(t, v.post("/optional", "o", ""), 201, "optional")
	v.wantCount(3)
}

// testInvalidKeys: invalid keys are 400 and the handler does not run.
func testInvalidKeys(t *testing.T, v *env) {
	wantFresh(t, v.post("/echo", "good", "x"), 201, "x")
	for _, tc := range []struct {
		name string
		vals []string
	}{
		{"empty", []string{""}},
		{"blank", []string{"   "}},
		{"empty quoted", []string{`""`}},
		{"256 characters", []string{strings.Repeat("k", 256)}},
		{"non-ASCII", []string{"clé"}},
		{"control character", []string{"a\x01b"}},
		{"two header lines", []string{"good", "good"}},
		{"a list", []string{"good, other"}},
		{"a quoted list", []string{`"good", "other"`}},
		{"parameters", []string{`"good";x=1`}},
		{"unterminated quote", []string{`"good`}},
		{"bad escape", []string{`"go\od"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hr := httptest.NewRequest("POST", "/echo", strings.NewReader("x"))
			hr.Header["Idempotency-Key"] = tc.vals
			w := httptest.NewRecorder()
			v.h.ServeHTTP(w, hr)
			wantProblem(t, resp{code: w.Code, header: w.Result().Header, body: w.Body.String()}, 400)
		})
	}
	v.wantCount(1)
	wantReplay(t, v.post("/echo", "good", "x"), 201, "x")
}

// testLongestKey: 255-character key is accepted.
func testLongestKey(t *testing.T, v *env) {
	k := strings.Repeat("k", 255)
	wantFresh(t, v.post("/echo", k, "x"), 201, "x")
	wantReplay(t, v.post("/echo", k, "x"), 201, "x")
}

// testSafeMethods: safe methods are never touched.
func testSafeMethods(t *testing.T, v *env) {
	for i := 0; i < 2; i++ {
		r := v.do(req{method: "GET", target: "/counter", key: "g, not a valid key"})
		wantStatus(t, r, 200)
		if r.header.Get("Idempotent-Replayed") != "" {
			t.Error("GET was replayed")
		}
	}
	wantFresh(t, v.post("/echo", "after", ""), 201, "")
	if r := v.do(req{method: "GET", target: "/counter", key: "after"}); r.body != `{"count":1}` {
		t.Errorf("GET /counter with a used key: %q, want the live count 1", r.body)
	}
}

// testUnmatchedRoutes: unmatched routes pass through untouched.
func testUnmatchedRoutes(t *testing.T, v *env) {
	r := v.do(req{method: "POST", target: "/no/such/route", key: `"unterminated`})
	if r.code != 404 {
		t.Errorf("unknown route: status %d, want the router's 404", r.code)
	}
	r = v.do(req{method: "POST", target: "/counter", key: `"unterminated`})
	if r.code != 404 && r.code != 405 {
		t.Errorf("wrong method: status %d, want the router's 404 or 405", r.code)
	}
}

// testRelease5xx: 5xx releases the key.
func testRelease5xx(t *testing.T, v *env) {
	for _, code := range []string{"500", "502", "503"} {
		wantFresh(t, v.post("/status/"+code, "e"+code, ""), mustAtoi(code), "status:"+code)
		wantFresh(t, v.post("/status/"+code, "e"+code, ""), mustAtoi(code), "status:"+code)
	}
	v.wantCount(6)
}

// testRelease429: 429 releases the key.
func testRelease429(t *testing.T, v *env) {
	wantFresh(t, v.post("/status/429", "r", ""), 429, "status:429")
	wantFresh(t, v.post("/status/429", "r", ""), 429, "status:429")
	v.wantCount(2)
}

// testStoredStatuses: 2xx, 3xx and other 4xx are stored.
func testStoredStatuses(t *testing.T, v *env) {
	for _, code := range []string{"200", "202", "204", "302", "400", "404", "409", "422"} {
		body := "status:" + code
		if code == "204" {
			body = ""
		}
		wantFresh(t, v.post("/status/"+code, "s"+code, ""), mustAtoi(code), body)
		wantReplay(t, v.post("/status/"+code, "s"+code, ""), mustAtoi(code), body)
	}
	v.wantCount(8)
}

// testPanic: panic releases the key.
func testPanic(t *testing.T, v *env) {
	wantStatus(t, v.post("/panic", "p", ""), 500)
	wantStatus(t, v.post("/panic", "p", ""), 500)
	v.wantCount(2)
}

// testSetCookie: Set-Cookie is never replayed.
func testSetCookie(t *testing.T, v *env) {
	r1 := v.post("/cookie", "ck", "")
	wantFresh(t, r1, 201, "cookie")
	if r1.header.Get("Set-Cookie") == "" {
		t.Fatal("the first response lost its Set-Cookie")
	}
	r2 := v.post("/cookie", "ck", "")
	wantReplay(t, r2, 201, "cookie")
	if sc := r2.header.Get("Set-Cookie"); sc != "" {
		t.Errorf("replay carries Set-Cookie %q", sc)
	}
	v.wantCount(1)
}

// testConflict: in-progress duplicate is 409 with Retry-After.
func testConflict(t *testing.T, v *env) {
	first := v.async(req{method: "POST", target: "/slow?ms=400", key: "busy"})
	v.waitCount(1)
	r := v.post("/slow?ms=400", "busy", "")
	wantProblem(t, r, 409)
	wantRetryAfter(t, r)
	wantFresh(t, first(), 200, "slept:400")
	wantReplay(t, v.post("/slow?ms=400", "busy", ""), 200, "slept:400")
	v.wantCount(1)
}

// testConflictMismatch: in-progress duplicate with another body is 422.
func testConflictMismatch(t *testing.T, v *env) {
	first := v.async(req{method: "POST", target: "/slow?ms=300", key: "busy"})
	v.waitCount(1)
	wantProblem(t, v.post("/slow?ms=301", "busy", ""), 422)
	first()
}

// testWaitReplays: wait mode replays once the first finishes.
func testWaitReplays(t *testing.T, v *env) {
	first := v.async(req{method: "POST", target: "/slow?ms=200", key: "w"})
	v.waitCount(1)
	wantReplay(t, v.post("/slow?ms=200", "w", ""), 200, "slept:200")
	wantFresh(t, first(), 200, "slept:200")
	v.wantCount(1)
}

// testWaitGivesUp: wait mode gives up with 409.
func testWaitGivesUp(t *testing.T, v *env) {
	first := v.async(req{method: "POST", target: "/slow?ms=600", key: "w"})
	v.waitCount(1)
	r := v.post("/slow?ms=600", "w", "")
	wantProblem(t, r, 409)
	wantRetryAfter(t, r)
	first()
	v.wantCount(1)
}

// testConcurrentDuplicates: concurrent duplicates run the handler once.
func testConcurrentDuplicates(t *testing.T, v *env) {
	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes {
		wg.Go(func() { codes[i] = v.post("/slow?ms=50", "dup", "").code })
	}
	wg.Wait()
	v.wantCount(1)
	for i, c := range codes {
		if c != 200 && c != 409 {
			t.Errorf("duplicate %d: status %d, want 200 or 409", i, c)
		}
	}
}

// testInstantRetry: an instant retry is replayed, never 409.
func testInstantRetry(t *testing.T, v *env) {
	// The retry is sent from inside the first response's first write:
	// the moment its client could see a byte. The record must be
	// complete by then.
	for i := 0; i < 200; i++ {
		k := "tight-" + strconv.Itoa(i)
		w := &retryingWriter{ResponseRecorder: httptest.NewRecorder(), retry: func() resp { return v.post("/echo", k, "x") }}
		v.h.ServeHTTP(w, req{method: "POST", target: "/echo", key: k, body: "x"}.build())
		if w.Code != 201 || !w.fired {
			t.Fatalf("try %d: first %d (retry sent: %v)", i, w.Code, w.fired)
		}
		if r2 := w.retried; r2.code != 201 || r2.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("try %d: a retry sent as the first response started got %d (replayed %q), want a replay", i, r2.code, r2.header.Get("Idempotent-Replayed"))
		}
	}
	v.wantCount(200)
}

// testRequestCap: request body over the cap is 413.
func testRequestCap(t *testing.T, v *env) {
	wantProblem(t, v.post("/echo", "big", strings.Repeat("b", 2048)), 413)
	wantProblem(t, v.do(req{method: "POST", target: "/echo", key: "big2", body: strings.Repeat("b", 2048), chunked: true}), 413)
	v.wantCount(0)
	wantFresh(t, v.post("/echo", "big", strings.Repeat("b", 1024)), 201, strings.Repeat("b", 1024))
}

// testResponseCap: response over the cap is sent in full and replayed without its body.
func testResponseCap(t *testing.T, v *env) {
	r1 := v.post("/large?bytes=5000", "L", "")
	wantFresh(t, r1, 200, strings.Repeat("x", 5000))
	r2 := v.post("/large?bytes=5000", "L", "")
	wantReplay(t, r2, 200, "")
	if r2.header.Get(idem.HeaderBodyOmitted) != "true" {
		t.Errorf("%s = %q, want true", idem.HeaderBodyOmitted, r2.header.Get(idem.HeaderBodyOmitted))
	}
	v.wantCount(1)
	r3 := v.post("/large?bytes=1000", "S", "")
	wantFresh(t, r3, 200, strings.Repeat("x", 1000))
	wantReplay(t, v.post("/large?bytes=1000", "S", ""), 200, strings.Repeat("x", 1000))
}

// testFailClosed: store failure fails closed with 503.
func testFailClosed(t *testing.T, v *env) {
	v.fail.setDown(true)
	r := v.post("/echo", "down", "x")
	wantProblem(t, r, 503)
	wantRetryAfter(t, r)
	v.wantCount(0)
	v.fail.setDown(false)
	wantFresh(t, v.post("/echo", "down", "x"), 201, "x")
	wantReplay(t, v.post("/echo", "down", "x"), 201, "x")
}

// testLateCompletion: a completion the store missed lands once it is back, and the retry replays.
func testLateCompletion(t *testing.T, v *env) {
	v.fail.setCompleteDown(true)
	wantFresh(t, v.post("/echo", "blip", "x"), 201, "x")
	r := v.post("/echo", "blip", "x")
	wantProblem(t, r, 409)
	wantRetryAfter(t, r)
	v.fail.setCompleteDown(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := v.post("/echo", "blip", "x")
		if r.code != 409 {
			wantReplay(t, r, 201, "x")
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still 409 ten seconds after the store came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	v.wantCount(1)
}

// testFailOpen: store failure with fail open runs unprotected.
func testFailOpen(t *testing.T, v *env) {
	v.fail.setDown(true)
	wantFresh(t, v.post("/echo", "open", "x"), 201, "x")
	wantFresh(t, v.post("/echo", "open", "x"), 201, "x")
	v.wantCount(2)
}

// testRetention: completed record expires after the retention.
func testRetention(t *testing.T, v *env) {
	wantFresh(t, v.post("/echo", "exp", "x"), 201, "x")
	v.clock.Advance(59 * time.Minute)
	wantReplay(t, v.post("/echo", "exp", "x"), 201, "x")
	v.clock.Advance(2 * time.Minute)
	wantFresh(t, v.post("/echo", "exp", "x"), 201, "x")
	v.wantCount(2)
}

// testAbandonedClaim: abandoned claim blocks until its lease ends, then is taken over.
func testAbandonedClaim(t *testing.T, v *env) {
	// A claim whose owner died: planted directly in the store.
	now := v.clock.Now()
	res, err := v.store.Claim(t.Context(), store.Claim{
		Scope: idem.Scope("", "POST", "/echo"), Key: "dead",
		Fingerprint: idem.Fingerprint("POST", "/echo", []byte("x")),
		Token:       "dead-owner", Now: now, LeaseEnd: now.Add(time.Minute),
	})
	if err != nil || !res.Acquired {
		t.Fatalf("planting a claim: %v %+v", err, res)
	}
	r := v.post("/echo", "dead", "x")
	wantProblem(t, r, 409)
	if ra := r.header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1 (the hint, not the lease left)", ra)
	}
	v.clock.Advance(61 * time.Second)
	wantFresh(t, v.post("/echo", "dead", "x"), 201, "x")
	wantReplay(t, v.post("/echo", "dead", "x"), 201, "x")
	v.wantCount(1)
}

// testAdminHandler: admin handler inspects a running claim and evicts it.
func testAdminHandler(t *testing.T, v *env) {
	_, canGet := v.store.(store.Getter)
	_, canDelete := v.store.(store.Deleter)
	if !canGet || !canDelete {
		t.Skipf("%T has no Getter or Deleter", v.store)
	}
	// Records are inspected through an admin handler on its own engine
	// over the same store (they are addressed the same way whatever
	// engine serves them), and evicted through the serving engine's: an
	// engine that runs the key itself frees it for its own duplicates at
	// once, and on another engine's eviction at its next heartbeat.
	e, err := idem.New(v.store, idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ask := func(method string) (int, map[string]any) {
		admin := e.AdminHandler()
		if method == http.MethodDelete {
			admin = v.e.AdminHandler()
		}
		q := url.Values{"namespace": {"ops"}, "method": {"POST"}, "route": {"/slow"}, "key": {"adm"}}
		w := httptest.NewRecorder()
		admin.ServeHTTP(w, httptest.NewRequest(method, "/admin?"+q.Encode(), nil))
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("admin %s: %d %q", method, w.Code, w.Body)
		}
		return w.Code, out
	}
	slow := req{method: "POST", target: "/slow?ms=800", key: "adm", header: http.Header{"Authorization": {"Bearer ops"}}}
	first := v.async(slow)
	v.waitCount(1)
	if code, rec := ask("GET"); code != 200 || rec["state"] != "in_progress" {
		t.Fatalf("running claim: %d %v", code, rec)
	}
	if code, rec := ask("DELETE"); code != 200 || rec["deleted"] != true {
		t.Fatalf("evict: %d %v", code, rec)
	}
	if code, rec := ask("GET"); code != 404 || !strings.HasSuffix(fmt.Sprint(rec["type"]), "#admin-not-found") {
		t.Fatalf("after evict: %d %v", code, rec)
	}
	// With the claim evicted, the retry runs instead of getting 409.
	wantFresh(t, v.do(slow), 200, "slept:800")
	first()
	v.wantCount(2)
	code, rec := ask("GET")
	if code != 200 || rec["state"] != "completed" || rec["status"] != float64(200) || rec["body_size"] != float64(len("slept:800")) {
		t.Errorf("completed record: %d %v", code, rec)
	}
}

// testProblemTypeBase: problem type URL is configurable.
func testProblemTypeBase(t *testing.T, v *env) {
	p := wantProblem(t, v.post("/echo", "", ""), 400)
	if s, _ := p["type"].(string); !strings.HasPrefix(s, "https://example.com/problems/") {
		t.Errorf("type %q does not use the configured base", s)
	}
}

// testReplayHeader: replay header name is configurable.
func testReplayHeader(t *testing.T, v *env) {
	v.post("/echo", "h", "")
	r := v.post("/echo", "h", "")
	if r.header.Get("X-Replayed") != "true" || r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("replay headers: X-Replayed=%q Idempotent-Replayed=%q", r.header.Get("X-Replayed"), r.header.Get("Idempotent-Replayed"))
	}
}
