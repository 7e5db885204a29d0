package idem

import (
	"net/http"
	"testing"
)

func TestOuterHeadersAreNotReplayed(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	n := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		w.Header().Set("X-Request-Id", "req-"+string(rune('0'+n)))
		e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", "/orders/1")
			w.WriteHeader(201)
		})).ServeHTTP(w, r)
	})
	first := post(h, "/", "k", "")
	retry := post(h, "/", "k", "")
	if first.Header().Get("X-Request-Id") != "req-1" || retry.Header().Get("X-Request-Id") != "req-2" {
		t.Errorf("request ids: first %q, retry %q; the retry must keep its own", first.Header().Get("X-Request-Id"), retry.Header().Get("X-Request-Id"))
	}
	if retry.Header().Get("Location") != "/orders/1" {
		t.Errorf("the handler's header was not replayed: %v", retry.Header())
	}
}

func TestBodyOmittedDropsRepresentationHeaders(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	h := e.Middleware(WithMaxResponseBody(4))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte("more than four bytes"))
	}))
	post(h, "/", "k", "")
	w := post(h, "/", "k", "")
	if w.Header().Get("Content-Encoding") != "" || w.Header().Get("Content-Type") != "text/plain" || w.Header().Get(HeaderBodyOmitted) != "true" {
		t.Errorf("body-omitted replay headers %v", w.Header())
	}
}
