package mysqlstore

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
)

// orderServer is an exactly-once engine in front of a handler that writes
// an order through the request's transaction. The order's ref comes from
// the request body; a body of "fail" makes the handler answer 503 after
// writing.
type orderServer struct {
	f    txFixture
	srv  *httptest.Server
	runs atomic.Int32
}

func newOrderServer(t *testing.T) *orderServer {
	f := newTxFixture(t, newDB(t, 32))
	o := &orderServer{f: f}
	e, err := idem.New(f.s, idem.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	var nextID atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		o.runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		ref := string(body)
		id := nextID.Add(1)
		if err := f.insert(r.Context(), int(id), ref); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
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
	return o.f.ordersFor(t, ref)
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
			if resp, body := o.post(t, "k-5xx", "fail"); resp.StatusCode != http.StatusServiceUnavailable {
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

// Wait mode across two instances: duplicates sent to a second engine on
// another Store (another process) wait for the first request and replay
// its response, woken by the poller.
func TestEngineWaitMode(t *testing.T) {
	s1 := newStore(t, nil, WithWatchInterval(50*time.Millisecond))
	s2, err := New(newDB(t, 8), WithTable(s1.Table()), WithSweepInterval(0), WithWatchInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	release := make(chan struct{})
	var runs atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-release
		io.WriteString(w, "done")
	})
	var srvs []*httptest.Server
	for _, s := range []*Store{s1, s2} {
		e, err := idem.New(s, idem.WithWait(10*time.Second), idem.WithLogger(quietLog))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e.Middleware()(handler))
		defer srv.Close()
		srvs = append(srvs, srv)
	}
	post := func(srv *httptest.Server) (int, string) {
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
	wg.Go(func() { post(srvs[0]) })
	for runs.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	type result struct {
		code int
		body string
	}
	results := make(chan result, 4)
	for i := range 4 {
		wg.Go(func() {
			c, b := post(srvs[i%2])
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
