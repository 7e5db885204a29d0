package pgxstore

import (
	"context"
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
)

var quietLog = slog.New(slog.DiscardHandler)

// orderServer is an exactly-once engine in front of a handler that writes
// an order through the request's transaction. The order's ref comes from
// the request body; a body of "fail" makes the handler answer 503 after
// writing, and a ref that is already taken violates a deferred constraint
// when the engine commits.
type orderServer struct {
	f    txFixture
	srv  *httptest.Server
	runs atomic.Int32
}

func newOrderServer(t *testing.T, opts ...idem.Option) *orderServer {
	f := newTxFixture(t)
	o := &orderServer{f: f}
	e, err := idem.New(f.s, append([]idem.Option{idem.WithLogger(quietLog)}, opts...)...)
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
		id := nextID.Add(1)
		if _, err := tx.Exec(r.Context(), `INSERT INTO `+quoted(f.orders)+` (id, ref) VALUES ($1, $2)`, id, ref); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if ref == "fail" {
			http.Error(w, "downstream unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"ref":%q}`, id, ref)
	})
	o.srv = httptest.NewServer(e.Middleware()(mux))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *orderServer) post(t *testing.T, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", o.srv.URL+"/orders", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	resp, err := o.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (o *orderServer) orders(t *testing.T, ref string) int {
	t.Helper()
	var n int
	if err := o.f.s.db.QueryRow(t.Context(), `SELECT count(*) FROM `+quoted(o.f.orders)+` WHERE ref = $1`, ref).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
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
	})

	t.Run("commit failure answers 503 and releases", func(t *testing.T) {
		if resp, body := o.post(t, "k-first", "dup"); resp.StatusCode != http.StatusCreated {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		runs := o.runs.Load()
		// Another key with the same ref: the deferred unique constraint
		// fails at COMMIT, after the handler has answered 201.
		resp, body := o.post(t, "k-dup", "dup")
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "commit-failed") || strings.Contains(body, `"ref"`) {
			t.Fatalf("status %d: %s; want 503 commit-failed without the handler's body", resp.StatusCode, body)
		}
		if resp.Header.Get("Retry-After") == "" {
			t.Fatalf("commit-failed without Retry-After: %v", resp.Header)
		}
		if n := o.orders(t, "dup"); n != 1 {
			t.Fatalf("%d orders with ref dup, want 1", n)
		}
		// Released: the retry runs again (and fails again the same way).
		resp, _ = o.post(t, "k-dup", "dup")
		if resp.StatusCode != http.StatusServiceUnavailable || o.runs.Load()-runs != 2 {
			t.Fatalf("retry: status %d, %d runs", resp.StatusCode, o.runs.Load()-runs)
		}
		scope := idem.Scope("", "POST", "/orders")
		if _, ok, err := o.f.s.Get(t.Context(), ref(scope, "k-dup"), time.Now()); err != nil || ok {
			t.Fatalf("record left after failed commits: %v %v", ok, err)
		}
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

// Wait mode on PostgreSQL: duplicates wait for the first request and get
// its response, woken by LISTEN/NOTIFY.
func TestEngineWaitMode(t *testing.T) {
	p := newPool(t)
	s := newStore(t, p)
	e, err := idem.New(s, idem.WithWait(10*time.Second), idem.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var runs atomic.Int32
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-release
		io.WriteString(w, "done")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func() (int, string, time.Duration) {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", srv.URL+"/x", nil)
		req.Header.Set("Idempotency-Key", "w")
		start := time.Now()
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			return 0, "", 0
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), time.Since(start)
	}
	var wg sync.WaitGroup
	wg.Go(func() { post() })
	for runs.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	type result struct {
		code int
		body string
	}
	results := make(chan result, 3)
	for range 3 {
		wg.Go(func() {
			c, b, _ := post()
			results <- result{c, b}
		})
	}
	time.Sleep(300 * time.Millisecond) // let them start waiting
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
