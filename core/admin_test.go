package idem

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func adminDo(t *testing.T, h http.Handler, method string, q url.Values) (int, map[string]any) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, "/admin?"+q.Encode(), nil))
	var out map[string]any
	if w.Body.Len() > 0 {
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("admin %s: body %q is not JSON", method, w.Body)
		}
	}
	return w.Code, out
}

func TestAdminInspectAndEvict(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s)
	admin := e.AdminHandler()
	block := make(chan struct{})
	var runs atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			<-block
		}
		w.Write([]byte("secret body"))
	})
	h := e.Middleware(WithNamespace(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))(mux)
	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/orders/7", strings.NewReader("x"))
		r.Header.Set("Idempotency-Key", "k1")
		r.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- send() }()
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	q := url.Values{"namespace": {"acme"}, "method": {"post"}, "route": {"/orders/{id}"}, "key": {`"k1"`}}
	code, rec := adminDo(t, admin, "GET", q)
	if code != 200 || rec["state"] != "in_progress" || rec["lease_end"] == nil {
		t.Fatalf("running claim: %d %v", code, rec)
	}
	code, rec = adminDo(t, admin, "DELETE", q)
	if code != 200 || rec["deleted"] != true {
		t.Fatalf("evict: %d %v", code, rec)
	}
	if code, rec = adminDo(t, admin, "GET", q); code != 404 || rec["type"] != DefaultProblemTypeBase+"admin-not-found" {
		t.Fatalf("after evict: %d %v", code, rec)
	}
	// With the claim evicted, the next retry runs.
	if w := send(); w.Body.String() != "secret body" || runs.Load() != 2 {
		t.Fatalf("retry after evict: %d %q, runs %d", w.Code, w.Body, runs.Load())
	}
	close(block)
	<-done
	code, rec = adminDo(t, admin, "GET", q)
	if code != 200 || rec["state"] != "completed" || rec["status"] != float64(200) || rec["body_size"] != float64(len("secret body")) {
		t.Fatalf("completed: %d %v", code, rec)
	}
	w := httptest.NewRecorder()
	admin.ServeHTTP(w, httptest.NewRequest("GET", "/admin?"+q.Encode(), nil))
	if strings.Contains(w.Body.String(), "secret body") {
		t.Error("the admin handler shows the stored body")
	}
	if code, rec = adminDo(t, admin, "DELETE", url.Values{"method": {"POST"}, "route": {"/nope"}, "key": {"k1"}}); code != 200 || rec["deleted"] != false {
		t.Errorf("evicting nothing: %d %v", code, rec)
	}
}

func TestAdminErrors(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	admin := e.AdminHandler()
	for _, q := range []url.Values{
		{"route": {"/x"}, "key": {"k"}},
		{"method": {"POST"}, "key": {"k"}},
		{"method": {"POST"}, "route": {"/x"}},
		{"method": {"POST"}, "route": {"/x"}, "key": {"a, b"}},
	} {
		if code, p := adminDo(t, admin, "GET", q); code != 400 || p["type"] == nil {
			t.Errorf("%v: %d %v", q, code, p)
		}
	}
	if code, _ := adminDo(t, admin, "POST", url.Values{}); code != 405 {
		t.Errorf("POST: %d", code)
	}
	type bare struct{ Store }
	e2, _ := newEngine(t, bare{newTestStore()})
	q := url.Values{"method": {"POST"}, "route": {"/x"}, "key": {"k"}}
	for _, m := range []string{"GET", "DELETE"} {
		if code, _ := adminDo(t, e2.AdminHandler(), m, q); code != 501 {
			t.Errorf("%s on a store without the capability: %d, want 501", m, code)
		}
	}
}

func TestAdminEmptyRoute(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s)
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	post(h, "/", "k", "")
	w := httptest.NewRecorder()
	e.AdminHandler().ServeHTTP(w, httptest.NewRequest("GET", "/?method=POST&route=&key=k", nil))
	if w.Code != 200 {
		t.Errorf("a record of an unrouted handler: %d %s", w.Code, w.Body)
	}
}

// TestAdminAddressesEveryRecord: records of Do (an Op.Kind in lower case,
// as gRPC's), of WithGlobalKeys (no method, no route) and of an HTTP
// method given in lower case can all be looked at and evicted.
func TestAdminAddressesEveryRecord(t *testing.T) {
	t.Run("Do", func(t *testing.T) {
		e, _ := newEngine(t, newTestStore(), WithReplayCache(1<<20, time.Hour))
		op := Op{Kind: "grpc", Name: "/pkg.Svc/Charge", Key: "key", Fingerprint: "fp"}
		fn := func(context.Context) ([]byte, error) { return []byte("x"), nil }
		e.Do(t.Context(), op, fn)
		q := url.Values{"method": {"grpc"}, "route": {"/pkg.Svc/Charge"}, "key": {"key"}}
		if code, out := adminDo(t, e.AdminHandler(), "GET", q); code != 200 || out["found"] != true {
			t.Errorf("GET: %d %v", code, out)
		}
		if code, out := adminDo(t, e.AdminHandler(), "DELETE", q); code != 200 || out["deleted"] != true {
			t.Errorf("DELETE: %d %v", code, out)
		}
		if _, replayed, _ := e.Do(t.Context(), op, fn); replayed {
			t.Error("replayed after the eviction")
		}
	})
	t.Run("global keys", func(t *testing.T) {
		e, _ := newEngine(t, newTestStore(), WithGlobalKeys())
		post(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })), "/a", "k", "")
		q := url.Values{"method": {""}, "route": {""}, "key": {"k"}}
		if code, out := adminDo(t, e.AdminHandler(), "DELETE", q); code != 200 || out["deleted"] != true {
			t.Errorf("DELETE: %d %v", code, out)
		}
	})
	t.Run("lower-case HTTP method", func(t *testing.T) {
		e, _ := newEngine(t, newTestStore())
		post(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })), "/a", "k", "")
		q := url.Values{"method": {"post"}, "route": {""}, "key": {"k"}}
		if code, out := adminDo(t, e.AdminHandler(), "GET", q); code != 200 || out["method"] != "POST" {
			t.Errorf("GET: %d %v", code, out)
		}
	})
	t.Run("no method", func(t *testing.T) {
		e, _ := newEngine(t, newTestStore())
		if code, _ := adminDo(t, e.AdminHandler(), "GET", url.Values{"route": {""}, "key": {"k"}}); code != 400 {
			t.Errorf("GET without method: %d, want 400", code)
		}
	})
}
