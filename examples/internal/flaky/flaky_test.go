package flaky

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

// fixture serves the conformance fixture behind a real engine on the
// memory store, in-process.
func fixture(t *testing.T) (*conformance.Fixture, *httptest.Server) {
	t.Helper()
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	engine, err := idem.New(store)
	if err != nil {
		t.Fatal(err)
	}
	f := conformance.NewFixture()
	srv := httptest.NewServer(f.ServeMux(engine.Middleware))
	t.Cleanup(srv.Close)
	return f, srv
}

func start(t *testing.T, srv *httptest.Server, cfg Config) *Proxy {
	t.Helper()
	u, _ := url.Parse(srv.URL)
	cfg.Target = u.Host
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func post(client *http.Client, u, key, body string) (int, string, http.Header, error) {
	req, _ := http.NewRequest("POST", u+"/echo", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

// noRetry is a client whose transport never resends a request itself
// (net/http resends a request with an Idempotency-Key once when a reused
// connection fails).
func noRetry() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
}

func TestFlakyForwards(t *testing.T) {
	f, srv := fixture(t)
	p := start(t, srv, Config{})
	client := &http.Client{Timeout: 10 * time.Second}
	for i, key := range []string{"a", "b", "a"} {
		code, body, h, err := post(client, p.URL(), key, "hello")
		if err != nil || code != 201 || body != "hello" || (i == 2) != (h.Get("Idempotent-Replayed") == "true") {
			t.Errorf("request %d: %d %q %v %v", i, code, body, h, err)
		}
	}
	if f.Count() != 2 {
		t.Errorf("handler ran %d times, want 2", f.Count())
	}
	if s := p.Stats(); s != (Stats{Requests: 3, Forwarded: 3}) {
		t.Errorf("stats %+v", s)
	}
}

func TestFlakyDropAfterHandled(t *testing.T) {
	f, srv := fixture(t)
	p := start(t, srv, Config{Drop: 1})
	if _, _, _, err := post(noRetry(), p.URL(), "k", "hello"); !errors.Is(err, io.EOF) {
		t.Fatalf("error %v, want EOF: the response is lost", err)
	}
	if f.Count() != 1 {
		t.Fatalf("handler ran %d times, want 1: the server handled the request", f.Count())
	}
	// Straight to the server, the same key is a replay: it was stored.
	code, body, h, err := post(noRetry(), srv.URL, "k", "hello")
	if err != nil || code != 201 || body != "hello" || h.Get("Idempotent-Replayed") != "true" || f.Count() != 1 {
		t.Errorf("retry: %d %q replayed=%q %v, handler ran %d times", code, body, h.Get("Idempotent-Replayed"), err, f.Count())
	}
	if s := p.Stats(); s != (Stats{Requests: 1, Dropped: 1}) {
		t.Errorf("stats %+v", s)
	}
}

func TestFlakyResetBeforeForwarding(t *testing.T) {
	f, srv := fixture(t)
	p := start(t, srv, Config{Reset: 1})
	if _, _, _, err := post(noRetry(), p.URL(), "k", "hello"); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("error %v, want a connection reset", err)
	}
	if f.Count() != 0 {
		t.Errorf("handler ran %d times, want 0: a reset request is never forwarded", f.Count())
	}
	if s := p.Stats(); s != (Stats{Requests: 1, Reset: 1}) {
		t.Errorf("stats %+v", s)
	}
}

func TestFlakyDelay(t *testing.T) {
	_, srv := fixture(t)
	p := start(t, srv, Config{Delay: 1, DelayTime: 50 * time.Millisecond})
	began := time.Now()
	if code, _, _, err := post(noRetry(), p.URL(), "k", "x"); err != nil || code != 201 {
		t.Fatalf("%d %v", code, err)
	}
	if d := time.Since(began); d < 50*time.Millisecond {
		t.Errorf("answered after %v, before the delay", d)
	}
	if s := p.Stats(); s != (Stats{Requests: 1, Forwarded: 1, Delayed: 1}) {
		t.Errorf("stats %+v", s)
	}
}

func TestFlakyTargetDown(t *testing.T) {
	_, srv := fixture(t)
	p := start(t, srv, Config{})
	srv.Close()
	if _, _, _, err := post(noRetry(), p.URL(), "k", "x"); err == nil {
		t.Error("a request through a proxy to a stopped server succeeded")
	}
	if s := p.Stats(); s.Failed != 1 {
		t.Errorf("stats %+v, want one failed", s)
	}
}

// TestFlakyCloseStops closes the proxy while a request is held in a
// minute-long delay: Close returns at once and the client gets an error.
func TestFlakyCloseStops(t *testing.T) {
	_, srv := fixture(t)
	p := start(t, srv, Config{Delay: 1, DelayTime: time.Minute})
	errc := make(chan error, 1)
	go func() {
		_, _, _, err := post(noRetry(), p.URL(), "k", "x")
		errc <- err
	}()
	for p.Stats().Delayed == 0 {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if err := <-errc; err == nil {
		t.Error("the held request succeeded after Close")
	}
	if _, _, _, err := post(noRetry(), p.URL(), "k", "x"); err == nil {
		t.Error("the proxy still answers after Close")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestFlakySeededDecisions(t *testing.T) {
	draw := func(seed uint64) []fault {
		p := &Proxy{cfg: Config{Drop: 0.3, Reset: 0.2}}
		p.rng = newRand(seed)
		var fs []fault
		for range 1000 {
			f, _ := p.decide()
			fs = append(fs, f)
		}
		return fs
	}
	a, b, c := draw(7), draw(7), draw(8)
	counts := map[fault]int{}
	same := true
	for i := range a {
		counts[a[i]]++
		same = same && a[i] == c[i]
		if a[i] != b[i] {
			t.Fatalf("decision %d differs for the same seed", i)
		}
	}
	if same {
		t.Error("seeds 7 and 8 drew the same decisions")
	}
	if counts[drop] < 200 || counts[drop] > 400 || counts[reset] < 100 || counts[reset] > 300 {
		t.Errorf("counts %v for drop 0.3 and reset 0.2 over 1000", counts)
	}
}

func TestFlakyBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Target: "127.0.0.1:1", Drop: -0.1},
		{Target: "127.0.0.1:1", Delay: 1.5},
		{Target: "127.0.0.1:1", Drop: 0.6, Reset: 0.5},
		{Target: "127.0.0.1:1", DelayTime: -time.Second},
	} {
		if p, err := New(cfg); err == nil {
			p.Close()
			t.Errorf("%+v accepted", cfg)
		}
	}
}
