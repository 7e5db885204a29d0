package conformance

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestColonPath(t *testing.T) {
	for in, want := range map[string]string{
		"/echo":                "/echo",
		"/status/{code}":       "/status/:code",
		"/items/{id}/x/{name}": "/items/:id/x/:name",
	} {
		if got := (Route{Path: in}).ColonPath(); got != want {
			t.Errorf("ColonPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNamespace(t *testing.T) {
	for hdr, want := range map[string]string{"": "", "Bearer alice": "alice", "bearer  bob ": "bob", "Basic xyz": "", "Bearer": ""} {
		r := httptest.NewRequest("POST", "/", nil)
		if hdr != "" {
			r.Header.Set("Authorization", hdr)
		}
		if got := Namespace(r); got != want {
			t.Errorf("Namespace(%q) = %q, want %q", hdr, got, want)
		}
	}
}

// TestFixtureRoutes checks the routes answer as the table in Fixture's
// documentation says, without any middleware.
func TestFixtureRoutes(t *testing.T) {
	f := NewFixture()
	mux := http.NewServeMux()
	for _, rt := range f.Routes() {
		mux.HandleFunc(rt.Method+" "+rt.Path, func(w http.ResponseWriter, r *http.Request) { rt.Handler(w, r, r.PathValue) })
	}
	srv := Recoverer(mux)
	do := func(method, target, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest(method, target, strings.NewReader(body)))
		return w
	}
	for _, tc := range []struct {
		method, target, body string
		code                 int
		want                 string
	}{
		{"POST", "/echo", "abc", 201, "abc"},
		{"PATCH", "/echo", "abc", 200, "abc"},
		{"POST", "/status/418", "", 418, "status:418"},
		{"POST", "/status/204", "", 204, ""},
		{"POST", "/status/abc", "", 400, ""},
		{"POST", "/slow?ms=1", "", 200, "slept:1"},
		{"POST", "/slow?ms=-1", "", 400, ""},
		{"POST", "/large?bytes=5", "", 200, "xxxxx"},
		{"POST", "/items/42", "", 201, "item:42"},
		{"POST", "/cookie", "", 201, "cookie"},
		{"POST", "/optional", "", 201, "optional"},
		{"POST", "/panic", "", 500, ""},
	} {
		w := do(tc.method, tc.target, tc.body)
		if w.Code != tc.code || (tc.want != "" && w.Body.String() != tc.want) {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.target, w.Code, w.Body, tc.code, tc.want)
		}
	}
	if got := do("GET", "/counter", "").Body.String(); got != `{"count":12}` {
		t.Errorf("counter %s, want 12 counted calls", got)
	}
	if w := do("POST", "/reset", ""); w.Code != 204 || f.Count() != 0 {
		t.Errorf("reset: %d, count %d", w.Code, f.Count())
	}
	if w := do("POST", "/echo", ""); w.Header().Get("Content-Type") != "application/octet-stream" {
		t.Errorf("echo default Content-Type %q", w.Header().Get("Content-Type"))
	}
}
