package idem

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestNestedMiddlewarePassesThrough(t *testing.T) {
	s := newTestStore()
	e, ev := newEngine(t, s)
	runs := 0
	inner := e.Middleware(TTL(time.Hour))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(201)
	}))
	h := e.Middleware()(inner)
	if w := post(h, "/", "k", ""); w.Code != 201 {
		t.Fatalf("first: %d %q", w.Code, w.Body)
	}
	if w := post(h, "/", "k", ""); w.Code != 201 || w.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %v", w.Code, w.Header())
	}
	if runs != 1 || len(ev.outcomes()) != 2 {
		t.Errorf("runs %d, events %v", runs, ev.outcomes())
	}
}

func TestBodyErrors(t *testing.T) {
	e, ev := newEngine(t, newTestStore())
	h := http.MaxBytesHandler(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})), 4)
	r := httptest.NewRequest("POST", "/", strings.NewReader("too long"))
	r.ContentLength = -1
	r.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 413 {
		t.Errorf("over an outer MaxBytesHandler: %d, want 413", w.Code)
	}
	r = httptest.NewRequest("POST", "/", io.MultiReader(strings.NewReader("ab"), errReader{}))
	r.ContentLength = -1
	r.Header.Set("Idempotency-Key", "k")
	w = httptest.NewRecorder()
	e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})).ServeHTTP(w, r)
	if w.Code != 400 {
		t.Errorf("unreadable body: %d", w.Code)
	}
	if got := ev.outcomes(); got[0] != OutcomeBodyTooLarge || got[1] != OutcomeBodyUnreadable {
		t.Errorf("outcomes %v", got)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }
