package idem

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestInvalidStatusIsNeverStored(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s)
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(42) }))
	for i := 0; i < 2; i++ {
		func() {
			defer func() {
				if v := recover(); v == nil || !strings.Contains(v.(string), "invalid WriteHeader code 42") {
					t.Errorf("recovered %v", v)
				}
			}()
			post(h, "/", "k", "")
		}()
	}
	if s.count("complete") != 0 || s.count("release") != 2 {
		t.Errorf("calls %v", s.calls)
	}
}

func TestEarlyHintsAndTrailers(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	srv := httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(200)
		io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
	})))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Set("Idempotency-Key", "k")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Trailer.Get("X-Checksum") != "abc" {
		t.Errorf("trailer %v", resp.Trailer)
	}
	if resp.Header.Get("Link") == "" {
		t.Errorf("final headers %v", resp.Header)
	}
}

func TestAbandon(t *testing.T) {
	s := newTestStore()
	e, _ := newEngine(t, s)
	outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Outer", "1")
		e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Inner", "1")
			if !Abandon(w) {
				t.Error("Abandon refused")
			}
			if _, err := w.Write([]byte("x")); err == nil {
				t.Error("a write after Abandon succeeded")
			}
		})).ServeHTTP(w, r)
		if w.Header().Get("X-Inner") != "" {
			t.Error("the abandoned handler's headers reached the writer")
		}
		w.WriteHeader(418) // the outer renderer answers
	})
	for i := 0; i < 2; i++ {
		if w := post(outer, "/", "k", ""); w.Code != 418 {
			t.Errorf("%d", w.Code)
		}
	}
	if s.count("release") != 2 || s.count("complete") != 0 {
		t.Errorf("calls %v", s.calls)
	}
	if Abandon(httptest.NewRecorder()) {
		t.Error("Abandon on an unprotected writer")
	}
}

func TestPanicAfterStreamingEvictsTheRecord(t *testing.T) {
	s := newTestStore()
	e, ev := newEngine(t, s)
	h := e.Middleware(WithMaxResponseBody(4))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("more than four bytes"))
		panic(http.ErrAbortHandler)
	}))
	func() {
		defer func() { recover() }()
		post(h, "/", "k", "")
	}()
	if len(s.recs) != 0 {
		t.Errorf("the truncated stream's record was kept: %v", s.recs)
	}
	if got := ev.outcomes(); len(got) != 1 || got[0] != OutcomeReleased {
		t.Errorf("outcomes %v", got)
	}
}

func TestPanicAfterLostStreamKeepsTheNewOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s, WithLease(3*time.Second), WithHeartbeat(time.Second))
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			for _, rec := range s.recs {
				rec.token = "new-owner" // another request took the key over
			}
			s.mu.Unlock()
			time.Sleep(2 * time.Second) // the heartbeat finds the claim lost
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}))
		func() {
			defer func() { recover() }()
			post(h, "/", "k", "")
		}()
		if len(s.recs) != 1 {
			t.Error("the loser's panic deleted the new owner's record")
		}
	})
}

func TestEarlyHintsKeepStoredHeaders(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/orders/1")
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(201)
	}))
	post(h, "/", "k", "")
	if w := post(h, "/", "k", ""); w.Header().Get("Location") != "/orders/1" {
		t.Errorf("replay after early hints lost the handler's headers: %v", w.Header())
	}
}

func TestFlushAfterAbandon(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			Abandon(w)
			w.(http.Flusher).Flush()
			if err := http.NewResponseController(w).Flush(); err == nil {
				t.Error("FlushError after Abandon succeeded")
			}
		})).ServeHTTP(w, r)
		w.WriteHeader(502)
	})
	if w := post(h, "/", "k", ""); w.Code != 502 {
		t.Errorf("%d", w.Code)
	}
}

func TestStreamedTrailers(t *testing.T) {
	e, _ := newEngine(t, newTestStore())
	srv := httptest.NewServer(e.Middleware(WithMaxResponseBody(1))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, "streamed body")
		w.Header().Set("X-Checksum", "abc")
	})))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL, nil)
	req.Header.Set("Idempotency-Key", "k")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Trailer.Get("X-Checksum") != "abc" {
		t.Errorf("streamed trailers %v", resp.Trailer)
	}
}
