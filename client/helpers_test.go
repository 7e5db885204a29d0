package idemclient

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// pipeServer serves h over in-memory connections (net.Pipe), so a test in
// a synctest bubble never touches the network and its fake clock moves
// whenever every goroutine waits. It returns a transport that dials the
// server; both stop when the test ends.
func pipeServer(t *testing.T, h http.Handler) *http.Transport {
	t.Helper()
	ln := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() { srv.Serve(ln); close(served) }()
	tr := &http.Transport{DialContext: ln.dial}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		<-served
	})
	return tr
}

type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: errors.New("connection refused")}
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// seen is one request as the fake server got it.
type seen struct {
	key  string
	keys int // header lines carrying the key
	body string
	at   time.Time
}

// fakeServer answers the n-th request it gets (from 0) with steps[n], and
// every later one with ok. It keeps what it saw.
type fakeServer struct {
	mu    sync.Mutex
	steps []step
	reqs  []seen
}

type step func(w http.ResponseWriter, r *http.Request)

func (s *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.reqs)
	s.reqs = append(s.reqs, seen{key: r.Header.Get(DefaultKeyHeader), keys: len(r.Header.Values(DefaultKeyHeader)), body: string(b), at: time.Now()})
	st := ok
	if n < len(s.steps) {
		st = s.steps[n]
	}
	s.mu.Unlock()
	st(w, r)
}

func (s *fakeServer) seen() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.reqs...)
}

// ok answers 201 "created".
func ok(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, "created")
}

// replayed answers 201 "created" marked as a replay.
func replayed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(DefaultReplayHeader, "true")
	ok(w, r)
}

const idemConflict = `{"type":"https://github.com/idemkit/idem/blob/main/docs/problems.md#conflict","title":"Request with this idempotency key is in progress","status":409,"detail":"A request with this key is still being processed; retry later."}`

// answer returns a step that answers code with body as contentType and,
// when retryAfter is not empty, a Retry-After header.
func answer(code int, contentType, body, retryAfter string) step {
	return func(w http.ResponseWriter, _ *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// conflict is idem's in-progress answer.
func conflict(retryAfter string) step {
	return answer(http.StatusConflict, "application/problem+json", idemConflict, retryAfter)
}

// drop closes the connection without answering, after reading the request.
func drop(w http.ResponseWriter, _ *http.Request) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	c.Close()
}

// newTransport returns a Transport over base with the given options, and
// jitter that always waits the longest backoff, so waits are exact.
func newTransport(t *testing.T, base http.RoundTripper, opts ...Option) *Transport {
	t.Helper()
	tr, err := New(base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	tr.cfg.retry.jitter = func(d time.Duration) time.Duration { return d }
	return tr
}

// post sends a POST with body through rt and returns the response with its
// body read, the body, and the error.
func post(t *testing.T, ctx context.Context, rt http.RoundTripper, body string, hdr ...string) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://pipe/orders", stringsReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response body: %v", err)
	}
	return resp, string(b), nil
}

// stringsReader is strings.NewReader, or nil for "" (a request without a body).
func stringsReader(s string) io.Reader {
	if s == "" {
		return nil
	}
	return &onlyReader{s: s}
}

// onlyReader is a reader http.NewRequest does not know, so the request has
// no GetBody and the transport must buffer it.
type onlyReader struct{ s string }

func (r *onlyReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p, r.s)
	r.s = r.s[n:]
	return n, nil
}
