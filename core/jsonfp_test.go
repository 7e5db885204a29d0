package idem

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// jsonHandler echoes the body it got, so a test can check that the
// handler sees the bytes the client sent, and counts its runs.
func jsonHandler(runs *int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*runs++
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
	})
}

func problemType(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var p problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("not a problem: %q", w.Body)
	}
	return strings.TrimPrefix(p.Type, DefaultProblemTypeBase)
}

// TestJSONFingerprintSameMeaning sends a first body, then a retry spelled
// differently with the same key: the retry must replay (same meaning) or
// get 422 (different meaning).
func TestJSONFingerprintSameMeaning(t *testing.T) {
	for _, tc := range []struct {
		name, first, retry string
		opts               []JSONOption
		same               bool
	}{
		{"whitespace", `{"a":1,"b":[1,2]}`, " {\n \"a\" : 1 ,\t\"b\" : [ 1, 2 ] }\n", nil, true},
		{"member order", `{"a":1,"b":{"c":2,"d":3}}`, `{"b":{"d":3,"c":2},"a":1}`, nil, true},
		{"unicode escapes", `{"name":"café"}`, `{"n\u0061me":"caf\u00e9"}`, nil, true},
		{"1.0 and 1", `{"n":1.0}`, `{"n":1}`, nil, true},
		{"1e0 and 1", `{"n":1e0}`, `{"n":1}`, nil, true},
		{"100 and 1E2", `{"n":100}`, `{"n":1E2}`, nil, true},
		{"different value", `{"n":1}`, `{"n":2}`, nil, false},
		{"different string", `{"s":"a"}`, `{"s":"A"}`, nil, false},
		{"null and absent", `{"a":1,"b":null}`, `{"a":1}`, nil, false},
		{"array order matters", `[1,2]`, `[2,1]`, nil, false},
		{"ignored field changes", `{"amount":5,"sent_at":"10:00"}`, `{"sent_at":"10:01","amount":5}`, []JSONOption{Ignore("/sent_at")}, true},
		{"ignored field absent", `{"amount":5,"sent_at":"10:00"}`, `{"amount":5}`, []JSONOption{Ignore("/sent_at")}, true},
		{"other field with an ignore", `{"amount":5,"sent_at":"10:00"}`, `{"amount":6,"sent_at":"10:00"}`, []JSONOption{Ignore("/sent_at")}, false},
		{"ignored nested, escaped", `{"m":{"a/b":1,"~t":1,"x":1}}`, `{"m":{"a/b":2,"~t":2,"x":1}}`, []JSONOption{Ignore("/m/a~1b", "/m/~0t")}, true},
		{"ignored array element field", `{"items":[{"ts":1,"sku":"a"},{"ts":1,"sku":"b"}]}`, `{"items":[{"ts":2,"sku":"a"},{"ts":1,"sku":"b"}]}`, []JSONOption{Ignore("/items/0/ts")}, true},
		{"index 0 only", `{"items":[{"ts":1},{"ts":1}]}`, `{"items":[{"ts":1},{"ts":2}]}`, []JSONOption{Ignore("/items/0/ts")}, false},
		{"two indexes of one array", `[1,2,3]`, `[9,9,3]`, []JSONOption{Ignore("/0", "/1")}, true},
		{"only: other fields change", `{"amount":5,"note":"x"}`, `{"note":"y","amount":5.0}`, []JSONOption{Only("/amount")}, true},
		{"only: picked field changes", `{"amount":5,"note":"x"}`, `{"amount":6,"note":"x"}`, []JSONOption{Only("/amount")}, false},
		{"only: absent and null differ", `{"amount":null}`, `{}`, []JSONOption{Only("/amount")}, false},
		{"only with ignore inside", `{"p":{"a":1,"ts":1},"q":1}`, `{"p":{"a":1,"ts":2},"q":2}`, []JSONOption{Only("/p"), Ignore("/p/ts")}, true},
		{"ignore a non-object", `[1]`, `[1]`, []JSONOption{Ignore("/a/b")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newEngine(t, newTestStore())
			runs := 0
			h := e.Middleware(WithJSONFingerprint(tc.opts...))(jsonHandler(&runs))
			if w := post(h, "/orders", "k1", tc.first); w.Code != 201 || w.Body.String() != tc.first {
				t.Fatalf("first: %d %q", w.Code, w.Body)
			}
			w := post(h, "/orders", "k1", tc.retry)
			switch {
			case tc.same && (w.Code != 201 || w.Header().Get(DefaultReplayHeader) != "true" || w.Body.String() != tc.first):
				t.Errorf("retry %q: %d %q, want the first response replayed", tc.retry, w.Code, w.Body)
			case !tc.same && w.Code != 422:
				t.Errorf("retry %q: %d %q, want 422", tc.retry, w.Code, w.Body)
			}
			if runs != 1 {
				t.Errorf("handler ran %d times", runs)
			}
		})
	}
}

func TestJSONFingerprintKeepsMethodAndTarget(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	runs := 0
	h := e.Middleware(WithJSONFingerprint())(jsonHandler(&runs))
	post(h, "/orders?x=1", "k", `{"a":1}`)
	if w := post(h, "/orders?x=2", "k", `{"a":1}`); w.Code != 422 {
		t.Errorf("another query: %d, want 422", w.Code)
	}
	// The JSON fingerprint is the default one of the canonical body, so a
	// body sent canonical keeps its fingerprint when an engine switches.
	r := httptest.NewRequest("POST", "/orders?x=1", nil)
	for _, body := range []string{`{"a":1,"b":[true]}`, ` { "b" : [ true ], "a" : 1.0 } `} {
		got, err := (&jsonConfig{}).fingerprint(r, []byte(body), nil)
		if want := fingerprintRequest(r, []byte(`{"a":1,"b":[true]}`)); got != want || err != nil {
			t.Errorf("%s: %s, %v; want %s", body, got, err, want)
		}
	}
	// An empty body is fingerprinted as empty, not refused.
	if w := post(h, "/empty", "k2", ""); w.Code != 201 {
		t.Errorf("empty body: %d %q", w.Code, w.Body)
	}
	if w := post(h, "/empty", "k2", ""); w.Header().Get(DefaultReplayHeader) != "true" {
		t.Errorf("empty body retry: %d %v", w.Code, w.Header())
	}
}

func TestJSONFingerprintInvalidBody(t *testing.T) {
	for _, tc := range []struct{ name, body, detail string }{
		{"not JSON", `amount=5`, "want a value"},
		{"truncated", `{"amount":5`, "want ',' or '}'"},
		{"duplicate member", `{"amount":5,"amount":6}`, "twice"},
		{"too deep", strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1), "deeper"},
		{"invalid UTF-8", "\"\xc3\x28\"", "UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore()
			e, ev := newEngine(t, s)
			runs := 0
			w := post(e.Middleware(WithJSONFingerprint())(jsonHandler(&runs)), "/orders", "k", tc.body)
			if w.Code != 400 || problemType(t, w) != "invalid-json" || !strings.Contains(w.Body.String(), tc.detail) {
				t.Errorf("%d %q, want 400 invalid-json saying %q", w.Code, w.Body, tc.detail)
			}
			if runs != 0 || s.count("claim") != 0 {
				t.Errorf("handler ran %d times, %d claims", runs, s.count("claim"))
			}
			if got := ev.outcomes(); len(got) != 1 || got[0] != OutcomeBodyUnreadable {
				t.Errorf("outcomes %v", got)
			}
		})
	}
}

func TestJSONOptionsRejected(t *testing.T) {
	fp := func(*http.Request, []byte) string { return "x" }
	for _, tc := range []struct {
		name string
		opts func() []HTTPOption
		why  string
	}{
		{"no slash", func() []HTTPOption { return []HTTPOption{WithJSONFingerprint(Ignore("a"))} }, "start with '/'"},
		{"empty pointer", func() []HTTPOption { return []HTTPOption{WithJSONFingerprint(Only(""))} }, "whole body"},
		{"bad tilde", func() []HTTPOption { return []HTTPOption{WithJSONFingerprint(Ignore("/a~2"))} }, "~0"},
		{"tilde at end", func() []HTTPOption { return []HTTPOption{WithJSONFingerprint(Ignore("/a/b~"))} }, "~0"},
		{"no pointers", func() []HTTPOption { return []HTTPOption{WithJSONFingerprint(Only())} }, "no pointers"},
		{"invalid UTF-8", func() []HTTPOption { return []HTTPOption{WithJSONFingerprint(Ignore("/\xff"))} }, "UTF-8"},
		{"both fingerprints", func() []HTTPOption { return []HTTPOption{WithFingerprint(fp), WithJSONFingerprint()} }, "choose one"},
		{"both fingerprints, reversed", func() []HTTPOption { return []HTTPOption{WithJSONFingerprint(), WithFingerprint(fp)} }, "choose one"},
		{"empty key field", func() []HTTPOption { return []HTTPOption{WithKeyField("")} }, "key field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, _ := newEngine(t, newTestStore())
			err := badOptionPanic(t, func() { e.Policy(tc.opts()...) })
			if !strings.Contains(fmt.Sprint(err), tc.why) {
				t.Errorf("%v, want ErrBadOption saying %q", err, tc.why)
			}
		})
	}
}

func TestParsePointer(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"/a", []string{"a"}},
		{"/a/0/b", []string{"a", "0", "b"}},
		{"/", []string{""}},
		{"//", []string{"", ""}},
		{"/a~1b", []string{"a/b"}},
		{"/m~0n", []string{"m~n"}},
		{"/~01", []string{"~1"}}, // ~0 first would be wrong: not "/"
		{"/~10", []string{"/0"}},
	} {
		p, err := parsePointer(tc.in)
		if err != nil || strings.Join(p.tokens, "|") != strings.Join(tc.want, "|") || len(p.tokens) != len(tc.want) {
			t.Errorf("parsePointer(%q) = %q, %v; want %q", tc.in, p.tokens, err, tc.want)
		}
	}
	doc, _, _ := parseJSON([]byte(`{"a":[10,{"b":"x"}],"":{"":1},"a/b":2,"m~n":3,"01":4}`))
	for _, tc := range []struct{ ptr, want string }{
		{"/a/0", "10"},
		{"/a/1/b", `"x"`},
		{"/a/2", ""},
		{"/a/01", ""},
		{"/a/-", ""},
		{"//", "1"},
		{"/a~1b", "2"},
		{"/m~0n", "3"},
		{"/01", "4"},
		{"/a/0/x", ""},
	} {
		p, _ := parsePointer(tc.ptr)
		got := ""
		if v := p.lookup(&doc); v != nil {
			got = string(appendCanonical(nil, v))
		}
		if got != tc.want {
			t.Errorf("lookup %q: %q, want %q", tc.ptr, got, tc.want)
		}
	}
}

// escapeToken is RFC 6901's escaping of one reference token.
func escapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func FuzzJSONPointer(f *testing.F) {
	for _, s := range []string{"/a", "/a~1b/0", "/~0~1", "", "a", "/~2", "/a/-", "//"} {
		f.Add(s, []byte(`{"a":[1,{"b":2}],"a/b":[0],"~/":null}`))
	}
	f.Fuzz(func(t *testing.T, ptr string, doc []byte) {
		p, err := parsePointer(ptr)
		if err != nil {
			return
		}
		var b strings.Builder
		for _, tok := range p.tokens {
			b.WriteString("/" + escapeToken(tok))
		}
		if b.String() != ptr {
			t.Fatalf("pointer %q parsed to %q, which escapes back to %q", ptr, p.tokens, b.String())
		}
		v, _, err := parseJSON(doc)
		if err != nil {
			return
		}
		found := p.lookup(&v) != nil
		jc := &jsonConfig{ignore: []jsonPointer{p}}
		c := jc.canonical(nil, &v)
		if !json.Valid(c) {
			t.Fatalf("ignoring %q in %q gives %q, not JSON", ptr, doc, c)
		}
		if p.lookup(&v) != nil {
			t.Fatalf("%q still names a value after it was ignored (found before: %v)", ptr, found)
		}
		if c := (&jsonConfig{only: []jsonPointer{p}}).canonical(nil, &v); !json.Valid(c) {
			t.Fatalf("only %q gives %q, not JSON", ptr, c)
		}
	})
}

func TestKeyField(t *testing.T) {
	for _, tc := range []struct {
		name, header, body string
		optional           bool
		code               int
		problem            string
		detail             string
	}{
		{"field", "", `{"request_id":"r-1","amount":5}`, false, 201, "", ""},
		{"field with spaces", "", `{"request_id":"r 1"}`, false, 201, "", ""},
		{"header wins", "h-1", `{"request_id":"r-1"}`, false, 201, "", ""},
		{"header wins over a bad field", "h-1", `{"request_id":7}`, false, 201, "", ""},
		{"a bad header is not replaced by the field", "a, b", `{"request_id":"r-1"}`, false, 400, "invalid-key", "list of keys"},
		{"absent, required", "", `{"amount":5}`, false, 400, "missing-key", `\"request_id\" string member`},
		{"nested is not top-level", "", `{"meta":{"request_id":"r-1"}}`, false, 400, "missing-key", ""},
		{"array body", "", `[{"request_id":"r-1"}]`, false, 400, "missing-key", ""},
		{"empty body", "", ``, false, 400, "missing-key", ""},
		{"absent, optional", "", `{"amount":5}`, true, 201, "", ""},
		{"number", "", `{"request_id":12}`, false, 400, "invalid-key", "is a number; send the key as a string"},
		{"null", "", `{"request_id":null}`, true, 400, "invalid-key", "is null"},
		{"object", "", `{"request_id":{}}`, false, 400, "invalid-key", "is an object"},
		{"empty string", "", `{"request_id":""}`, false, 400, "invalid-key", "is empty"},
		{"too long", "", `{"request_id":"` + strings.Repeat("k", MaxKeyLength+1) + `"}`, false, 400, "invalid-key", "256 characters long"},
		{"not ASCII", "", `{"request_id":"caf\u00e9"}`, false, 400, "invalid-key", "0xc3 at position 4"},
		{"control character", "", `{"request_id":"a\nb"}`, false, 400, "invalid-key", "0x0a at position 2"},
		{"invalid JSON", "", `{"request_id":"r-1",}`, false, 400, "invalid-json", ""},
		{"invalid JSON, optional", "", `request_id=r-1`, true, 400, "invalid-json", ""},
		{"duplicate field", "", `{"request_id":"a","request_id":"b"}`, false, 400, "invalid-json", "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore()
			opts := []HTTPOption{WithKeyField("request_id")}
			if tc.optional {
				opts = append(opts, Optional())
			}
			e, _ := newEngine(t, s)
			runs := 0
			h := e.Middleware(opts...)(jsonHandler(&runs))
			w := post(h, "/orders", tc.header, tc.body)
			if w.Code != tc.code || (tc.problem != "" && problemType(t, w) != tc.problem) || !strings.Contains(w.Body.String(), tc.detail) {
				t.Fatalf("%d %q, want %d %s saying %q", w.Code, w.Body, tc.code, tc.problem, tc.detail)
			}
			if tc.code != 201 {
				if runs != 0 || s.count("claim") != 0 {
					t.Errorf("refused request: %d runs, %d claims", runs, s.count("claim"))
				}
				return
			}
			if w.Body.String() != tc.body {
				t.Errorf("the handler got %q, want the body sent", w.Body)
			}
			// A retry replays when protected, runs again when not.
			w = post(h, "/orders", tc.header, tc.body)
			protected := !tc.optional
			if replayed := w.Header().Get(DefaultReplayHeader) == "true"; replayed != protected || runs != map[bool]int{true: 1, false: 2}[protected] {
				t.Errorf("retry: replayed %v, %d runs; protected %v", replayed, runs, protected)
			}
		})
	}
}

// TestKeyFieldSameKeyAsHeader: a key sent in the body and then in the
// header is one key.
func TestKeyFieldSameKeyAsHeader(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	runs := 0
	h := e.Middleware(WithKeyField("request_id"), WithJSONFingerprint())(jsonHandler(&runs))
	body := `{"request_id":"r-1","amount":5}`
	if w := post(h, "/orders", "", body); w.Code != 201 {
		t.Fatalf("first: %d %q", w.Code, w.Body)
	}
	if w := post(h, "/orders", "r-1", `{"amount":5, "request_id":"r-1"}`); w.Header().Get(DefaultReplayHeader) != "true" {
		t.Errorf("header retry: %d %q", w.Code, w.Body)
	}
	if w := post(h, "/orders", "", `{"request_id":"r-1","amount":6}`); w.Code != 422 {
		t.Errorf("same key, another amount: %d, want 422", w.Code)
	}
	if runs != 1 {
		t.Errorf("%d runs", runs)
	}
}

// TestKeyFieldRouteOptions: Required and Optional route options decide
// what a body without the field gets, as for a request without header.
func TestKeyFieldRouteOptions(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	runs := 0
	required := e.Middleware(WithKeyField("request_id"), Optional(), Required())(jsonHandler(&runs))
	optional := e.Middleware(WithKeyField("request_id"), Optional())(jsonHandler(&runs))
	if w := post(required, "/a", "", `{}`); w.Code != 400 {
		t.Errorf("Required route: %d, want 400", w.Code)
	}
	if w := post(optional, "/a", "", `{}`); w.Code != 201 {
		t.Errorf("optional route: %d, want 201", w.Code)
	}
	if w := post(required, "/a", "", `{"request_id":"x"}`); w.Code != 201 {
		t.Errorf("Required route with the field: %d", w.Code)
	}
}

func TestKeyFieldBodyCap(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	runs := 0
	w := post(e.Middleware(WithKeyField("request_id"), WithMaxRequestBody(16))(jsonHandler(&runs)), "/a", "", `{"request_id":"r-1","pad":"......"}`)
	if w.Code != 413 || runs != 0 {
		t.Errorf("%d, %d runs; want 413", w.Code, runs)
	}
}

// TestJSONFingerprintOverHTTP runs the net/http middleware on a real
// server: a retry whose JSON differs only in spelling and in an ignored
// field replays; another amount is a 422.
func TestJSONFingerprintOverHTTP(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	runs := 0
	mux := http.NewServeMux()
	mux.Handle("POST /payments", jsonHandler(&runs))
	srv := httptest.NewServer(e.Middleware(WithKeyField("request_id"), WithJSONFingerprint(Ignore("/sent_at")))(mux))
	defer srv.Close()
	send := func(key, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/payments", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	first := `{"request_id":"pay-1","amount":1.50,"sent_at":"2026-12-01T10:00:00Z"}`
	if resp, body := send("", first); resp.StatusCode != 201 || body != first {
		t.Fatalf("first: %d %q", resp.StatusCode, body)
	}
	resp, body := send("", "{\n  \"sent_at\": \"2026-12-01T10:00:05Z\",\n  \"amount\": 1.5,\n  \"request_id\": \"pay-1\"\n}")
	if resp.StatusCode != 201 || resp.Header.Get(DefaultReplayHeader) != "true" || body != first {
		t.Errorf("retry: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if resp, body := send("pay-1", `{"request_id":"pay-1","amount":2}`); resp.StatusCode != 422 {
		t.Errorf("another amount: %d %q", resp.StatusCode, body)
	}
	if resp, body := send("pay-2", `{"amount":`); resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("invalid JSON: %d %q", resp.StatusCode, body)
	}
	if runs != 1 {
		t.Errorf("%d runs", runs)
	}
}

// TestJSONFingerprintConcurrent runs requests in parallel, so that -race
// and the checks see parsers reused from the pool across requests.
func TestJSONFingerprintConcurrent(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	h := e.Middleware(WithKeyField("id"), WithJSONFingerprint(Ignore("/ts")))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	done := make(chan string, 8)
	for g := range 8 {
		go func() {
			for i := range 50 {
				body := fmt.Sprintf(`{"id":"k%d-%d","v":"caf\u00e9 %d","n":%d.5,"ts":%d}`, g, i, i, i, g)
				retry := fmt.Sprintf(`{"ts":%d, "n":%d.50, "v":"café %d", "id":"k%d-%d"}`, g+1, i, i, g, i)
				if w := post(h, "/", "", body); w.Body.String() != body {
					done <- fmt.Sprintf("first %s: %d %q", body, w.Code, w.Body)
					return
				}
				if w := post(h, "/", "", retry); w.Body.String() != body || w.Header().Get(DefaultReplayHeader) != "true" {
					done <- fmt.Sprintf("retry %s: %d %q", retry, w.Code, w.Body)
					return
				}
			}
			done <- ""
		}()
	}
	for range 8 {
		if msg := <-done; msg != "" {
			t.Error(msg)
		}
	}
}
