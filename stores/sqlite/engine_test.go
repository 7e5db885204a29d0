package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// orderServer is an exactly-once engine in front of a handler that writes
// an order through the request's transaction, on the database the store
// uses. The order's ref comes from the request body and must name a row of
// refs, through a deferred foreign key checked at COMMIT; "fail" makes the
// handler answer 503 after writing; a second order with the same id
// violates the primary key at once (a failing write).
type orderServer struct {
	db   *sql.DB
	s    *Store
	srv  *httptest.Server
	runs atomic.Int32
}

const ordersSchema = `
CREATE TABLE refs (ref TEXT PRIMARY KEY);
INSERT INTO refs (ref) VALUES ('r1'), ('fail'), ('conc'), ('dup');
CREATE TABLE orders (
    id  TEXT PRIMARY KEY,
    ref TEXT NOT NULL REFERENCES refs (ref) DEFERRABLE INITIALLY DEFERRED
);`

func newOrderServer(t *testing.T, opts ...idem.Option) *orderServer {
	t.Helper()
	db := newDB(t)
	if _, err := db.ExecContext(t.Context(), ordersSchema); err != nil {
		t.Fatal(err)
	}
	o := &orderServer{db: db, s: newStore(t, db)}
	e, err := idem.New(o.s.ExactlyOnce(), append([]idem.Option{idem.WithLogger(quietLog)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	var nextID atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		o.runs.Add(1)
		tx, ok := Tx(r.Context())
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		body, _ := io.ReadAll(r.Body)
		ref := string(body)
		id := fmt.Sprint(nextID.Add(1))
		if h := r.Header.Get("X-Order-Id"); h != "" {
			id = h
		}
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO orders (id, ref) VALUES (?, ?)`, id, ref); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if ref == "fail" {
			http.Error(w, "downstream unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q,"ref":%q}`, id, ref)
	})
	o.srv = httptest.NewServer(e.Middleware()(mux))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *orderServer) post(t *testing.T, key, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", o.srv.URL+"/orders", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := o.srv.Client().Do(req)
	if err != nil {
		t.Error(err)
		return &http.Response{}, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (o *orderServer) orders(t *testing.T, ref string) int {
	t.Helper()
	var n int
	if err := o.db.QueryRowContext(t.Context(), `SELECT count(*) FROM orders WHERE ref = ?`, ref).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (o *orderServer) recordGone(t *testing.T, key string) {
	t.Helper()
	scope := idem.Scope("", "POST", "/orders")
	if _, ok, err := o.s.Get(t.Context(), store.Ref{Scope: scope, Key: key}, time.Now()); err != nil || ok {
		t.Fatalf("record %q: found %v, err %v; want it released", key, ok, err)
	}
}

func TestEngineExactlyOnce(t *testing.T) {
	o := newOrderServer(t)

	t.Run("2xx commits order and record", func(t *testing.T) {
		resp, body := o.post(t, "k-ok", "r1")
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		resp2, body2 := o.post(t, "k-ok", "r1")
		if resp2.StatusCode != http.StatusCreated || body2 != body || resp2.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retry: %d %q %v; want the replay of %q", resp2.StatusCode, body2, resp2.Header, body)
		}
		if n := o.orders(t, "r1"); n != 1 {
			t.Fatalf("%d orders", n)
		}
	})

	t.Run("5xx rolls back and releases", func(t *testing.T) {
		runs := o.runs.Load()
		for i := range 2 {
			resp, body := o.post(t, "k-5xx", "fail")
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("attempt %d: status %d: %s", i, resp.StatusCode, body)
			}
		}
		if got := o.runs.Load() - runs; got != 2 {
			t.Fatalf("handler ran %d times, want 2 (released after each 5xx)", got)
		}
		if n := o.orders(t, "fail"); n != 0 {
			t.Fatalf("%d orders survived the 5xx", n)
		}
		o.recordGone(t, "k-5xx")
	})

	t.Run("constraint violated at commit answers 503 and releases", func(t *testing.T) {
		runs := o.runs.Load()
		// The deferred foreign key fails at COMMIT, after the handler has
		// answered 201.
		resp, body := o.post(t, "k-noref", "no-such-ref")
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "commit-failed") || strings.Contains(body, `"ref"`) {
			t.Fatalf("status %d: %s; want 503 commit-failed without the handler's body", resp.StatusCode, body)
		}
		if resp.Header.Get("Retry-After") == "" {
			t.Fatalf("commit-failed without Retry-After: %v", resp.Header)
		}
		if n := o.orders(t, "no-such-ref"); n != 0 {
			t.Fatalf("%d orders with a missing ref, want 0", n)
		}
		o.recordGone(t, "k-noref")
		// Released: the retry runs again (and fails again the same way).
		resp, _ = o.post(t, "k-noref", "no-such-ref")
		if resp.StatusCode != http.StatusServiceUnavailable || o.runs.Load()-runs != 2 {
			t.Fatalf("retry: status %d, %d runs", resp.StatusCode, o.runs.Load()-runs)
		}
	})

	t.Run("failing write answers 500 and releases", func(t *testing.T) {
		if resp, body := o.post(t, "k-dup1", "dup", "X-Order-Id", "same"); resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		resp, body := o.post(t, "k-dup2", "dup", "X-Order-Id", "same")
		if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "UNIQUE") {
			t.Fatalf("status %d: %s; want the handler's 500 for the duplicate id", resp.StatusCode, body)
		}
		if n := o.orders(t, "dup"); n != 1 {
			t.Fatalf("%d orders with ref dup, want 1", n)
		}
		o.recordGone(t, "k-dup2")
	})

	t.Run("concurrent duplicates run once", func(t *testing.T) {
		runs := o.runs.Load()
		var wg sync.WaitGroup
		codes := make(chan int, 20)
		for range 20 {
			wg.Go(func() {
				resp, _ := o.post(t, "k-conc", "conc")
				codes <- resp.StatusCode
			})
		}
		wg.Wait()
		close(codes)
		seen := map[int]int{}
		for c := range codes {
			seen[c]++
		}
		if got := o.runs.Load() - runs; got != 1 || o.orders(t, "conc") != 1 {
			t.Fatalf("handler ran %d times, %d orders; codes %v", got, o.orders(t, "conc"), seen)
		}
		if seen[http.StatusCreated]+seen[http.StatusConflict] != 20 {
			t.Fatalf("codes %v", seen)
		}
	})
}

// TestEngineConcurrentFirstRequests sends 64 first requests at once, each
// with its own key, in both modes: every one runs its handler once and is
// stored, and none meets SQLITE_BUSY (the store's writes queue on its
// write lock). Exactly-once requests run one at a time, so the engine's
// store timeout is raised above the queue's length on a loaded machine.
func TestEngineConcurrentFirstRequests(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		t.Run(fmt.Sprintf("exactly once %v", exactlyOnce), func(t *testing.T) {
			var logs lockedBuffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			o := newOrderServer(t, idem.WithStoreTimeout(time.Minute), idem.WithLogger(logger))
			if !exactlyOnce {
				// The plain engine on the same store, its handler writing
				// nothing: the claims and completions are all the writes.
				e, err := idem.New(o.s, idem.WithStoreTimeout(time.Minute), idem.WithLogger(logger))
				if err != nil {
					t.Fatal(err)
				}
				o.srv = httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					o.runs.Add(1)
					w.WriteHeader(http.StatusCreated)
				})))
				t.Cleanup(o.srv.Close)
			}
			const n = 64
			var wg sync.WaitGroup
			bodies := make(chan string, n)
			for i := range n {
				wg.Go(func() {
					resp, body := o.post(t, fmt.Sprintf("k-%d", i), "r1")
					if resp.StatusCode != http.StatusCreated {
						bodies <- fmt.Sprintf("%d: %s", resp.StatusCode, body)
					}
				})
			}
			wg.Wait()
			close(bodies)
			for b := range bodies {
				t.Errorf("a first request failed: %s", b)
			}
			if l := logs.String(); strings.Contains(l, "SQLITE_BUSY") || strings.Contains(l, "locked") {
				t.Errorf("the engine logged a busy database:\n%s", l)
			}
			if got := o.runs.Load(); got != n {
				t.Fatalf("handlers ran %d times, want %d", got, n)
			}
			var done int
			q := `SELECT count(*) FROM ` + quoteIdent(o.s.Table()) + ` WHERE state = 2`
			if err := o.db.QueryRowContext(t.Context(), q).Scan(&done); err != nil || done != n {
				t.Fatalf("%d completed records (%v), want %d", done, err, n)
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEngineWaitMode: duplicates wait for the first request and get its
// response, woken by the store's in-process Notifier.
func TestEngineWaitMode(t *testing.T) {
	s := newStore(t, nil)
	e, err := idem.New(s, idem.WithWait(10*time.Second), idem.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var runs atomic.Int32
	srv := httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-release
		io.WriteString(w, "done")
	})))
	defer srv.Close()
	post := func() (int, string) {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", srv.URL+"/x", nil)
		req.Header.Set("Idempotency-Key", "w")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var wg sync.WaitGroup
	wg.Go(func() { post() })
	for i := 0; runs.Load() == 0 && i < 1000; i++ {
		time.Sleep(5 * time.Millisecond)
	}
	type result struct {
		code int
		body string
	}
	results := make(chan result, 3)
	for range 3 {
		wg.Go(func() {
			c, b := post()
			results <- result{c, b}
		})
	}
	time.Sleep(100 * time.Millisecond) // let them start waiting
	close(release)
	wg.Wait()
	close(results)
	for r := range results {
		if r.code != http.StatusOK || r.body != "done" {
			t.Errorf("waiter got %d %q", r.code, r.body)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}
