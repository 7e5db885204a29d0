package idem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

func TestLostClaimWithTransactionAnswers500(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &txStore{testStore: newTestStore()}
		e, _ := newEngine(t, s, WithLease(3*time.Second), WithHeartbeat(time.Second))
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// An operator evicts the running claim.
			s.Delete(r.Context(), Scope("", "POST", ""), "k")
			time.Sleep(2 * time.Second)
			w.WriteHeader(201)
		}))
		if w := post(h, "/", "k", ""); w.Code != 500 {
			t.Errorf("a lost claim in a transaction: %d, want 500 (nothing was committed)", w.Code)
		}
		if s.committed != 0 || s.rolled == 0 {
			t.Errorf("committed %d, rolled back %d", s.committed, s.rolled)
		}
	})
}

func TestHeartbeatFollowsTheRouteLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newTestStore()
		e, _ := newEngine(t, s, WithLease(time.Hour), WithHeartbeat(30*time.Minute))
		runs := 0
		h := e.Middleware(TTL(3 * time.Second))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			if runs == 1 {
				time.Sleep(10 * time.Second)
			}
		}))
		done := make(chan struct{})
		go func() { post(h, "/", "k", ""); close(done) }()
		time.Sleep(5 * time.Second)
		if w := post(h, "/", "k", ""); w.Code != 409 {
			t.Errorf("a short route lease must be kept alive: %d, want 409", w.Code)
		}
		<-done
		if runs != 1 {
			t.Errorf("runs %d", runs)
		}
	})
}

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

func TestCorruptRecordFailsClosed(t *testing.T) {
	s := newTestStore()
	e, ev := newEngine(t, s)
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	post(h, "/", "k", "")
	for _, r := range s.recs {
		r.Response.Status = 0
	}
	if w := post(h, "/", "k", ""); w.Code != 503 {
		t.Errorf("replaying a corrupt record: %d, want 503", w.Code)
	}
	if got := ev.outcomes(); got[1] != OutcomeStoreFailure {
		t.Errorf("outcomes %v", got)
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

func TestWaitNeverRunsBesideAFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := &flakyStore{testStore: newTestStore()}
		e, ev := newEngine(t, fs, WithWait(5*time.Second), WithFailOpen())
		var inside, most atomic.Int32
		h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := inside.Add(1)
			most.Store(max(most.Load(), n))
			time.Sleep(2 * time.Second)
			inside.Add(-1)
		}))
		done := make(chan struct{})
		go func() { post(h, "/", "k", ""); close(done) }()
		synctest.Wait()
		fs.failAfter.Store(2) // the waiter's first look succeeds, its second fails
		if w := post(h, "/", "k", ""); w.Code != 409 {
			t.Errorf("store failure while waiting: %d, want 409", w.Code)
		}
		<-done
		if most.Load() != 1 {
			t.Errorf("%d handlers ran at once", most.Load())
		}
		_ = ev
	})
}

// flakyStore fails Claim once failAfter counts down to zero.
type flakyStore struct {
	*testStore
	failAfter atomic.Int32
}

func (s *flakyStore) Claim(ctx context.Context, c Claim) (ClaimResult, error) {
	if s.failAfter.Load() > 0 && s.failAfter.Add(-1) == 0 {
		return ClaimResult{}, errors.New("flaky")
	}
	return s.testStore.Claim(ctx, c)
}

func TestFailedClaimReleasesItsOrphan(t *testing.T) {
	s := &lateStore{testStore: newTestStore()}
	e, _ := newEngine(t, s)
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	if w := post(h, "/", "k", ""); w.Code != 503 {
		t.Fatalf("first: %d", w.Code)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.count("release") == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s.late.Store(false)
	if w := post(h, "/", "k", ""); w.Code != 201 {
		t.Errorf("retry after a claim whose answer was lost: %d, want 201 (the orphan released)", w.Code)
	}
}

// lateStore takes the claim but reports an error, as a timed-out call
// whose write landed.
type lateStore struct {
	*testStore
	late atomic.Bool
}

func (s *lateStore) Claim(ctx context.Context, c Claim) (ClaimResult, error) {
	res, err := s.testStore.Claim(ctx, c)
	if s.late.Load() || s.count("claim") == 1 {
		s.late.Store(true)
		return ClaimResult{}, context.DeadlineExceeded
	}
	return res, err
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
	e, ev := newEngine(t, s, WithMaxResponseBody(4))
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

func TestBodyOmittedDropsRepresentationHeaders(t *testing.T) {
	e, _ := newEngine(t, newTestStore(), WithMaxResponseBody(4))
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

func TestTinyRouteTTLWithHeartbeat(t *testing.T) {
	e, _ := newEngine(t, newTestStore(), WithHeartbeat(time.Second))
	h := e.Middleware(TTL(2))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	post(h, "/", "k", "") // must not crash the process
}

func TestStreamedTrailers(t *testing.T) {
	e, _ := newEngine(t, newTestStore(), WithMaxResponseBody(1))
	srv := httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
