package idem

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// httpOp is an Op as an HTTP transport on Start builds it.
func httpOp(key, body string) Op {
	return Op{Kind: "POST", Name: "/orders", Key: key, Fingerprint: Fingerprint("POST", "/orders", []byte(body))}
}

func TestStartFinishReplay(t *testing.T) {
	s := newTestStore()
	e, ev := newEngine(t, s)
	c, resp, err := e.Start(t.Context(), httpOp("k", "a"))
	if c == nil || resp != nil || err != nil {
		t.Fatalf("first Start: call %v, response %v, %v; want a call", c, resp, err)
	}
	h := http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"s=1"}, "Date": {"today"}}
	if err := c.Finish(Response{Status: 201, Header: h, Body: []byte(`{"id":1}`)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Finish(Response{Status: 500}); err != nil {
		t.Errorf("a second Finish: %v, want it ignored", err)
	}

	c2, resp, err := e.Start(t.Context(), httpOp("k", "a"))
	if c2 != nil || err != nil || resp == nil {
		t.Fatalf("retry: call %v, %v; want the stored response", c2, err)
	}
	if resp.Status != 201 || string(resp.Body) != `{"id":1}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("replayed %d %q %v", resp.Status, resp.Body, resp.Header)
	}
	for _, k := range []string{"Set-Cookie", "Date"} {
		if resp.Header[k] != nil {
			t.Errorf("%s was stored", k)
		}
	}
	rh := e.Policy().ReplayHeader(resp)
	if rh.Get("Idempotent-Replayed") != "true" || rh.Get("Content-Length") != "8" || rh.Get("Content-Type") != "application/json" {
		t.Errorf("ReplayHeader %v", rh)
	}
	rh.Set("Content-Type", "changed")
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Error("ReplayHeader shares the stored header's values")
	}
	if got := ev.outcomes(); len(got) != 2 || got[0] != OutcomeExecuted || got[1] != OutcomeReplayed {
		t.Errorf("outcomes %v", got)
	}
	if ev.evs[0].Status != 201 || ev.evs[0].Method != "POST" || ev.evs[0].Route != "/orders" {
		t.Errorf("event %+v", ev.evs[0])
	}
}

func TestFinishKeepsOrReleases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []HTTPOption
		resp    Response
		stored  bool
		omitted bool
	}{
		{name: "201", resp: Response{Status: 201, Body: []byte("ok")}, stored: true},
		{name: "400 is the answer", resp: Response{Status: 400}, stored: true},
		{name: "500 releases", resp: Response{Status: 500}},
		{name: "429 releases", resp: Response{Status: 429}},
		{name: "a status out of range releases", resp: Response{Status: 101}},
		{name: "the release rule", opts: []HTTPOption{WithReleaseRule(func(s int) bool { return s == 409 })}, resp: Response{Status: 409}},
		{name: "a body past the cap is omitted", opts: []HTTPOption{WithMaxResponseBody(4)},
			resp: Response{Status: 200, Body: []byte("12345"), Header: http.Header{"Etag": {`"x"`}}}, stored: true, omitted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore()
			e, _ := newEngine(t, s)
			c, _, err := e.Policy(tc.opts...).Start(t.Context(), httpOp("k", ""))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Finish(tc.resp); err != nil {
				t.Fatal(err)
			}
			rec, ok, _ := s.lookup(t.Context(), Scope("", "POST", "/orders"), "k", time.Now())
			if ok != tc.stored {
				t.Fatalf("stored %v, want %v", ok, tc.stored)
			}
			if !ok {
				return
			}
			if rec.Response.BodyOmitted != tc.omitted || tc.omitted && (rec.Response.Body != nil || rec.Response.Header["Etag"] != nil) {
				t.Errorf("stored %+v", rec.Response)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s, WithRequiredNamespace(), WithKeyValidator(func(k string) error {
		if strings.HasPrefix(k, "bad") {
			return errors.New("not ours")
		}
		return nil
	}))
	held, _, err := e.Start(t.Context(), Op{Namespace: "n", Kind: "POST", Name: "/", Key: "held", Fingerprint: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	done, _, _ := e.Start(t.Context(), Op{Namespace: "n", Kind: "POST", Name: "/", Key: "done", Fingerprint: "a"})
	done.Finish(Response{Status: 200})

	for _, tc := range []struct {
		name   string
		op     Op
		want   error
		status int
	}{
		{"no key", Op{Namespace: "n", Kind: "POST", Name: "/"}, ErrMissingKey, 400},
		{"invalid key", Op{Namespace: "n", Kind: "POST", Name: "/", Key: "a\x00"}, ErrInvalidKey, 400},
		{"refused key", Op{Namespace: "n", Kind: "POST", Name: "/", Key: "bad1"}, ErrInvalidKey, 400},
		{"no namespace", Op{Kind: "POST", Name: "/", Key: "k"}, ErrNamespaceRequired, 403},
		{"in flight", Op{Namespace: "n", Kind: "POST", Name: "/", Key: "held", Fingerprint: "a"}, ErrInFlight, 409},
		{"mismatch", Op{Namespace: "n", Kind: "POST", Name: "/", Key: "done", Fingerprint: "b"}, ErrMismatch, 422},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, resp, err := e.Start(t.Context(), tc.op)
			if c != nil || resp != nil || !errors.Is(err, tc.want) {
				t.Fatalf("call %v, response %v, %v; want %v", c, resp, err, tc.want)
			}
			p, ok := e.Policy().Problem(err)
			if !ok || p.Status != tc.status || p.Detail == "" || !strings.HasPrefix(p.Type, DefaultProblemTypeBase) {
				t.Fatalf("Problem: %+v %v", p, ok)
			}
			var body map[string]any
			if err := json.Unmarshal(p.JSON(), &body); err != nil || body["status"] != float64(tc.status) || body["title"] != p.Title {
				t.Errorf("JSON %s: %v", p.JSON(), err)
			}
			if (tc.status == 409) != (p.RetryAfter > 0) {
				t.Errorf("RetryAfter %d", p.RetryAfter)
			}
		})
	}
	if _, ok := e.Policy().Problem(errors.New("the transport's own")); ok {
		t.Error("Problem answered an error that is not the engine's")
	}
}

func TestCallReleaseAndContext(t *testing.T) {
	s := &txStore{testStore: newTestStore()}
	e, ev := newEngine(t, s)
	c, _, err := e.Start(t.Context(), httpOp("k", ""))
	if err != nil {
		t.Fatal(err)
	}
	type ctxKey struct{}
	ctx := context.WithValue(t.Context(), ctxKey{}, 1)
	if c.Context(ctx).Value(ctxKey{}) != 1 {
		t.Error("Context lost the caller's values")
	}
	c.Release()
	c.Release()
	if s.rolled != 1 {
		t.Errorf("rolled back %d times, want 1", s.rolled)
	}
	if _, ok, _ := s.lookup(t.Context(), Scope("", "POST", "/orders"), "k", time.Now()); ok {
		t.Error("Release left the claim")
	}
	if got := ev.outcomes(); len(got) != 1 || got[0] != OutcomeReleased {
		t.Errorf("outcomes %v, want one release", got)
	}

	// A failed commit: the response did not happen, and the client learns
	// it as 503 commit-failed.
	s.fail = true
	c, _, _ = e.Start(t.Context(), httpOp("k", ""))
	err = c.Finish(Response{Status: 201})
	p, _ := e.Policy().Problem(err)
	if !errors.Is(err, ErrStoreFailure) || p.Status != 503 || !strings.HasSuffix(p.Type, "commit-failed") {
		t.Errorf("failed commit: %v, problem %+v", err, p)
	}
}

func TestStartFailOpen(t *testing.T) {
	s := &flakyStore{testStore: newTestStore()}
	s.failAfter.Store(1)
	e, ev := newEngine(t, s, WithFailOpen())
	c, resp, err := e.Start(t.Context(), httpOp("k", ""))
	if c == nil || resp != nil || err != nil {
		t.Fatalf("call %v, response %v, %v; want an unprotected call", c, resp, err)
	}
	if err := c.Finish(Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	if s.count("complete") != 0 {
		t.Error("an unprotected call was completed")
	}
	if len(ev.evs) != 1 || !ev.evs[0].FailedOpen {
		t.Errorf("events %+v", ev.evs)
	}
}

func TestFingerprintRequest(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	plain := e.Policy()
	body := []byte(`{"b":1, "a":2}`)
	if got, _ := plain.FingerprintRequest("POST", "/o?x=1", body); got != Fingerprint("POST", "/o?x=1", body) {
		t.Error("the default is not Fingerprint")
	}
	js := e.Policy(WithJSONFingerprint())
	a, err := js.FingerprintRequest("POST", "/o", body)
	b, _ := js.FingerprintRequest("POST", "/o", []byte(`{"a":2,"b":1}`))
	if err != nil || a != b {
		t.Errorf("JSON fingerprints differ for equal documents: %v", err)
	}
	_, err = js.FingerprintRequest("POST", "/o", []byte(`{"a":`))
	if p, _ := js.Problem(err); !errors.Is(err, ErrInvalidJSON) || p.Status != 400 {
		t.Errorf("invalid JSON: %v, problem %+v", err, p)
	}
}

func TestRequestOptions(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	if got := e.Policy(Optional(), WithKeyHeader("X-Key")).RequestOptions(); got != nil {
		t.Errorf("plain policy: %v", got)
	}
	p := e.Policy(WithNamespace(func(*http.Request) string { return "" }),
		WithFingerprint(func(*http.Request, []byte) string { return "" }), WithKeyField("key"),
		RouteFunc(func(*http.Request) string { return "/" }))
	if got := strings.Join(p.RequestOptions(), ","); got != "WithNamespace,WithFingerprint,WithKeyField,RouteFunc" {
		t.Errorf("RequestOptions %q", got)
	}
}

func TestPolicyRoute(t *testing.T) {
	e, _ := newEngine(t, newTestStore(), WithRetention(time.Hour))
	p := e.Policy(ForRoute("POST", "/search", Optional()), ForRoute("POST", "/hook", Skip()), ForRoute("PATCH", "/x", TTL(time.Minute)))
	for _, tc := range []struct {
		method, route string
		want          Route
	}{
		{"POST", "/orders", Route{Required: true, Retention: time.Hour}},
		{"POST", "/search", Route{Retention: time.Hour}},
		{"POST", "/hook", Route{Skip: true, Required: true, Retention: time.Hour}},
		{"PATCH", "/x", Route{Required: true, Retention: time.Minute}},
	} {
		if got := p.Route(tc.method, tc.route); got != tc.want {
			t.Errorf("%s %s: %+v, want %+v", tc.method, tc.route, got, tc.want)
		}
		// Engine.Route, for transports that are not HTTP, decides the same.
		if got := e.Route(tc.method, tc.route, ForRoute("POST", "/search", Optional()), ForRoute("POST", "/hook", Skip()), ForRoute("PATCH", "/x", TTL(time.Minute))); got != tc.want {
			t.Errorf("Engine.Route %s %s: %+v, want %+v", tc.method, tc.route, got, tc.want)
		}
	}
}

func TestStartGlobalKeys(t *testing.T) {
	e, _ := newEngine(t, newTestStore(), WithGlobalKeys())
	c, _, err := e.Start(t.Context(), Op{Kind: "POST", Name: "/orders", Key: "k", Fingerprint: Fingerprint("POST", "/orders", nil)})
	if err != nil {
		t.Fatal(err)
	}
	c.Finish(Response{Status: 201})
	_, _, err = e.Start(t.Context(), Op{Kind: "POST", Name: "/refunds", Key: "k", Fingerprint: Fingerprint("POST", "/refunds", nil)})
	if !errors.Is(err, ErrMismatch) {
		t.Errorf("the key on another route: %v, want ErrMismatch", err)
	}
	// Do keeps its keys per kind and name.
	if _, _, err := e.Do(t.Context(), Op{Kind: "nats", Name: "orders", Key: "k", Fingerprint: "x"}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Errorf("Do with the key: %v", err)
	}
}

func TestReplayForAndProblemType(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	hp := e.Policy(WithProblemTypeBase("https://example.com/problems/"))
	stored := &Response{Status: 200, Header: http.Header{"Content-Encoding": {"br"}}, Body: []byte("x")}
	if got, err := e.ReplayFor(stored, []string{"br"}); err != nil || got != stored {
		t.Errorf("accepted coding: %v %v", got, err)
	}
	_, err := e.ReplayFor(stored, []string{"gzip"})
	p, ok := hp.Problem(err)
	if !errors.Is(err, ErrNotAcceptable) || !ok || p.Status != 406 || p.Type != "https://example.com/problems/not-acceptable" {
		t.Errorf("unaccepted coding: %v, problem %+v", err, p)
	}
	if got := hp.ProblemType("body-too-large"); got != "https://example.com/problems/body-too-large" {
		t.Errorf("ProblemType %q", got)
	}
	if got := e.Policy(ForRoute("post", "/x", Skip())).Route("Post", "/x"); !got.Skip {
		t.Error("Route is case-sensitive in the method, as ForRoute is not")
	}
}

// TestCompleteRefusesAStatusNoReplayCanCarry: Complete stores what it is
// given, but a status outside 200 to 599 cannot be replayed: it is refused
// with an error and the key released, never stored as a record that every
// retry would then find corrupt.
func TestCompleteRefusesAStatusNoReplayCanCarry(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s)
	for _, status := range []int{0, 101, 600} {
		c, _, err := e.Start(t.Context(), httpOp("k", "a"))
		if c == nil || err != nil {
			t.Fatalf("status %d: Start: %v", status, err)
		}
		if err := c.Complete(Response{Status: status, Body: []byte("x")}); err == nil || !strings.Contains(err.Error(), "is not 200 to 599") {
			t.Errorf("Complete with status %d: %v, want a refusal", status, err)
		}
		if len(s.recs) != 0 {
			t.Fatalf("status %d: the store holds %d records, want the key released", status, len(s.recs))
		}
	}
}
