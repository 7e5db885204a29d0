package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	idemclient "github.com/idemkit/idem/client"
	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/examples/internal/flaky"
	memstore "github.com/idemkit/idem/stores/memory"
)

// The client tests send logical requests through idemclient, over a fault
// proxy or across a killed process, and check that every one succeeds and,
// where it can be counted, that the handler ran once per request. They log
// how long each took to succeed and how many attempts it needed; they
// assert nothing about time.

const (
	clientRequests = 1000
	clientWorkers  = 16
	// The faults are per attempt: with 25% of attempts failing, 5 attempts
	// would leave about one request in a thousand failed; 10 leave one in
	// four million.
	clientAttempts = 10
)

// outcomes gathers what happened to each logical request.
type outcomes struct {
	mu       sync.Mutex
	took     []time.Duration
	attempts map[int]int
	replayed int
	statuses map[string]int // what the attempts got, by status or error kind
}

func newOutcomes() *outcomes {
	return &outcomes{attempts: map[int]int{}, statuses: map[string]int{}}
}

// hook counts every attempt's status or error.
func (o *outcomes) hook(a idemclient.Attempt) {
	kind := fmt.Sprint(a.Status)
	switch {
	case errors.Is(a.Err, syscall.ECONNRESET):
		kind = "reset"
	case errors.Is(a.Err, io.EOF):
		kind = "EOF"
	case a.Err != nil:
		kind = "error"
	}
	o.mu.Lock()
	o.statuses[kind]++
	o.mu.Unlock()
}

func (o *outcomes) add(took time.Duration, r idemclient.Result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.took = append(o.took, took)
	o.attempts[r.Attempts]++
	if r.Replayed {
		o.replayed++
	}
}

// log reports the time-to-success distribution and the attempts
// histogram.
func (o *outcomes) log(t *testing.T, name string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	d := slices.Clone(o.took)
	slices.Sort(d)
	if len(d) == 0 {
		return
	}
	pct := func(p float64) time.Duration {
		return d[min(len(d)-1, int(float64(len(d))*p))].Round(100 * time.Microsecond)
	}
	var hist []string
	for n := 1; n <= clientAttempts; n++ {
		if c := o.attempts[n]; c > 0 {
			hist = append(hist, fmt.Sprintf("%d:%d", n, c))
		}
	}
	t.Logf("%s: %d requests; time to success p50 %v, p90 %v, p99 %v, max %v; attempts %s; %d final answers were replays; attempt answers %v",
		name, len(d), pct(0.50), pct(0.90), pct(0.99), d[len(d)-1].Round(100*time.Microsecond), strings.Join(hist, " "), o.replayed, o.statuses)
}

// drive sends n logical POSTs to u from clientWorkers goroutines, the
// i-th with the body "order-i", and fails the test for any that does not
// end in the status want with the body wantBody(i). sent, when not nil, is
// called with the number of requests done after each success.
func drive(t *testing.T, client *http.Client, o *outcomes, n int, u string, want int, wantBody func(i int) string, sent func(done int)) {
	t.Helper()
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range clientWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				body := fmt.Sprintf("order-%d", i)
				began := time.Now()
				resp, err := client.Post(u, "text/plain", strings.NewReader(body))
				if err != nil {
					t.Errorf("request %d: %v", i, err)
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				took := time.Since(began)
				if err != nil || resp.StatusCode != want || string(b) != wantBody(i) {
					t.Errorf("request %d: %d %q %v, want %d %q", i, resp.StatusCode, b, err, want, wantBody(i))
					continue
				}
				r, ok := idemclient.ResultOf(resp)
				if !ok || r.Key == "" {
					t.Errorf("request %d: no result", i)
				}
				o.add(took, r)
				if sent != nil {
					sent(int(done.Add(1)))
				}
			}
		})
	}
	wg.Wait()
}

func newClient(t *testing.T, base http.RoundTripper, o *outcomes) *http.Client {
	t.Helper()
	tr, err := idemclient.New(base, idemclient.WithMaxAttempts(clientAttempts), idemclient.WithOnAttempt(o.hook))
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// TestClientThroughFlakyProxy sends 1,000 logical POSTs through a proxy
// that loses 20% of the responses after the server handled the request,
// resets 5% of the connections before forwarding and delays 5%: every one
// succeeds and the handler runs exactly 1,000 times, with the engine
// in-process and with the fixture program on each store.
//
// The client opens a connection per attempt, so that every fault reaches
// idemclient: over kept-alive connections net/http's Transport resends a
// request with an Idempotency-Key once by itself when a reused connection
// fails, and absorbs most faults (the "keep-alive" case shows it).
func TestClientThroughFlakyProxy(t *testing.T) {
	for _, tc := range []struct{ name, store string }{
		{"in-process", "in-process"},
		{"memory", "memory"},
		{"redis", "redis"},
		{"postgres", "postgres"},
		{"memory keep-alive", "memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, count := clientServer(t, tc.store)
			proxy, err := flaky.New(flaky.Config{Target: target, Drop: 0.2, Reset: 0.05, Delay: 0.05, DelayTime: 20 * time.Millisecond, Seed: 42})
			if err != nil {
				t.Fatal(err)
			}
			defer proxy.Close()
			o := newOutcomes()
			base := &http.Transport{DisableKeepAlives: true}
			if strings.HasSuffix(tc.name, "keep-alive") {
				base = &http.Transport{MaxIdleConnsPerHost: clientWorkers}
			}
			client := newClient(t, base, o)
			drive(t, client, o, clientRequests, proxy.URL()+"/echo", http.StatusCreated, func(i int) string { return fmt.Sprintf("order-%d", i) }, nil)
			if n := count(); n != clientRequests {
				t.Errorf("handler ran %d times for %d logical requests", n, clientRequests)
			}
			s := proxy.Stats()
			if s.Dropped == 0 || s.Reset == 0 {
				t.Errorf("proxy %+v: the faults did not happen", s)
			}
			o.log(t, tc.name)
			t.Logf("%s: proxy %+v", tc.name, s)
		})
	}
}

// clientServer starts the fixture for store and returns its address and a
// function that counts the handler's runs.
func clientServer(t *testing.T, store string) (string, func() int) {
	t.Helper()
	if store == "in-process" {
		ms := memstore.New()
		t.Cleanup(func() { ms.Close() })
		engine, err := idem.New(ms)
		if err != nil {
			t.Fatal(err)
		}
		f := conformance.NewFixture(idem.WithNamespace(conformance.Namespace))
		srv := httptest.NewServer(f.ServeMux(engine.Middleware))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://"), func() int { return int(f.Count()) }
	}
	var args []string
	if store != "memory" {
		args = storeArgs(t, store)
	}
	p := start(t, "fixture", args...)
	u, _ := url.Parse(p.url)
	return u.Host, func() int { return counter(t, p) }
}

// TestClientSurvivesKilledInstance spreads logical requests over two
// fixture processes sharing Redis and kills one with SIGKILL a third of
// the way through: every request still succeeds. A request in flight on
// the dead process is retried on the survivor, which answers 409 until the
// dead claim's lease ends (15 s with the default heartbeat), then runs it.
func TestClientSurvivesKilledInstance(t *testing.T) {
	t.Parallel() // it waits out a dead claim's lease
	const n = 400
	args := storeArgs(t, "redis") // the engine's defaults
	a := start(t, "fixture", args...)
	b := start(t, "fixture", args...)
	o := newOutcomes()
	base := &failover{base: &http.Transport{DisableKeepAlives: true}, hosts: []string{host(t, a.url), host(t, b.url)}}
	client := newClient(t, base, o)
	var kill sync.Once
	var killedAt atomic.Int64
	drive(t, client, o, n, a.url+"/slow?ms=50", http.StatusOK, func(int) string { return "slept:50" }, func(done int) {
		if done >= n/3 {
			kill.Do(func() {
				a.cmd.Process.Signal(syscall.SIGKILL)
				killedAt.Store(int64(done))
			})
		}
	})
	if killedAt.Load() == 0 {
		t.Fatal("the process was never killed")
	}
	if runs := counter(t, b); runs > n {
		t.Errorf("the survivor ran the handler %d times for %d requests", runs, n)
	}
	o.log(t, "two instances, one killed")
	t.Logf("killed after %d of %d requests; the survivor ran %d; failover dialled the dead one %d times", killedAt.Load(), n, counter(t, b), base.refused.Load())
}

// failover is a base transport over several instances: it sends each
// request to the next instance in turn, and to the following one when the
// connection is refused (nothing was sent, so that is always safe).
type failover struct {
	base    http.RoundTripper
	hosts   []string
	next    atomic.Uint64
	refused atomic.Int64
}

func (f *failover) RoundTrip(req *http.Request) (*http.Response, error) {
	first := int(f.next.Add(1))
	var err error
	for j := range f.hosts {
		r := req.Clone(req.Context())
		r.URL.Host, r.Host = f.hosts[(first+j)%len(f.hosts)], ""
		if j > 0 {
			if req.GetBody == nil {
				return nil, err
			}
			if r.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		var resp *http.Response
		resp, err = f.base.RoundTrip(r)
		if op, ok := errors.AsType[*net.OpError](err); !ok || op.Op != "dial" {
			return resp, err
		}
		f.refused.Add(1)
	}
	return nil, err
}

func host(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestClientExample runs examples/client against the chi example: every
// order succeeds, and the server holds one new order per order sent.
func TestClientExample(t *testing.T) {
	p := start(t, "chi")
	cmd := exec.Command(filepath.Join(bin, "client"), "-target", p.url, "-n", "30", "-concurrency", "4", "-attempts", "10", "-delay-time", "20ms")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	for _, want := range []string{"summary: 30 of 30 orders succeeded, 0 failed", "server: 30 new orders for 30 sent"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	lines := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "order ") {
			lines++
		}
	}
	if lines != 30 {
		t.Errorf("%d order lines, want 30:\n%s", lines, out)
	}
	cmd = exec.Command(filepath.Join(bin, "client"), "-target", "http://192.0.2.1:80")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "loopback") {
		t.Errorf("a non-loopback target was accepted: %v %s", err, out)
	}
}
