package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	idemclient "github.com/idemkit/idem/client"
)

// execution is the answer of the fixture's POST /pay, and what it
// records of each run of its handler.
type execution struct {
	Key     string `json:"key"`
	Exec    string `json:"exec"`
	PID     int    `json:"pid"`
	Arrived int64  `json:"arrived"` // Unix ns: the request reached the instance
	Started int64  `json:"started"` // Unix ns: the handler began
	At      int64  `json:"at"`      // Unix ns: the execution was recorded
}

// answer is how one logical request ended.
type answer struct {
	key      string
	status   int
	exec     execution // the body, when it parsed
	err      error
	result   idemclient.Result
	took     time.Duration
	received time.Time
}

// ok reports whether the request ended in success: 201 and a body naming
// its key.
func (a answer) ok() bool {
	return a.err == nil && a.status == http.StatusCreated && a.exec.Key == a.key && a.exec.Exec != ""
}

func (a answer) String() string {
	if a.err != nil {
		return fmt.Sprintf("%v (after %d attempts, %v)", a.err, a.result.Attempts, a.took.Round(time.Millisecond))
	}
	return fmt.Sprintf("%d exec %q of key %q replayed=%v (after %d attempts, %v)", a.status, a.exec.Exec, a.exec.Key, a.result.Replayed, a.result.Attempts, a.took.Round(time.Millisecond))
}

// picker is the client's base transport, a load balancer: it sends each
// attempt to a random live instance, and to another when the connection
// is refused (nothing was sent, so that is always safe). Every attempt
// carries the same Host header, the service's name, whichever instance it
// reaches: the engine's fingerprint includes the host.
type picker struct {
	insts []*instance
	base  http.RoundTripper
	rng   *lockedRand
}

func (p *picker) RoundTrip(req *http.Request) (*http.Response, error) {
	var err error
	tried := 0
	for _, i := range p.rng.Perm(len(p.insts)) {
		addr, ok := p.insts[i].target()
		if !ok {
			continue
		}
		r := req.Clone(req.Context())
		r.URL.Host, r.Host = addr, serviceHost
		if tried > 0 {
			if req.GetBody == nil {
				return nil, err
			}
			if r.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		tried++
		var resp *http.Response
		resp, err = p.base.RoundTrip(r)
		if op, ok := errors.AsType[*net.OpError](err); !ok || op.Op != "dial" {
			return resp, err
		}
	}
	if err == nil { // every instance is dead: as refused, which is retried
		err = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	if req.Body != nil && tried == 0 {
		req.Body.Close()
	}
	return nil, err
}

// serviceHost is the Host header of every request.
const serviceHost = "pay.chaos.test"

// load sends the logical requests and gathers what happened.
type load struct {
	cfg    *config
	client *http.Client
	rng    *lockedRand
	runID  string

	next     atomic.Int64
	mu       sync.Mutex
	answers  []answer
	attempts map[string]int // attempt answers, by status or error kind
}

func newLoad(cfg *config, insts []*instance, rng *lockedRand, runID string) (*load, error) {
	l := &load{cfg: cfg, rng: rng, runID: runID, attempts: map[string]int{}}
	base := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: time.Second}).DialContext,
		DisableKeepAlives:     true, // every fault reaches idemclient
		ResponseHeaderTimeout: cfg.attemptTimeout,
	}
	tr, err := idemclient.New(&picker{insts: insts, base: base, rng: rng},
		idemclient.WithMaxAttempts(cfg.maxAttempts),
		idemclient.WithBudget(cfg.budget),
		idemclient.WithBackoff(50*time.Millisecond, time.Second),
		idemclient.WithRetryAfterCap(250*time.Millisecond),
		idemclient.WithOnAttempt(l.hook))
	if err != nil {
		return nil, err
	}
	l.client = &http.Client{Transport: tr, Timeout: cfg.budget + cfg.attemptTimeout + 10*time.Second}
	return l, nil
}

// hook counts each attempt's answer.
func (l *load) hook(a idemclient.Attempt) {
	kind := strconv.Itoa(a.Status)
	switch {
	case a.Err != nil:
		kind = errKind(a.Err)
	case a.Status == http.StatusCreated && a.Replayed:
		kind = "201 replayed"
	case a.Status == http.StatusCreated:
		kind = "201 fresh"
	}
	l.mu.Lock()
	l.attempts[kind]++
	l.mu.Unlock()
}

func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "error"
}

// run sends requests from cfg.workers workers until ctx ends, the
// duration has passed or cfg.requests keys were sent. Each key is sent by
// 1 to cfg.dups concurrent logical requests, as a double-tapped button or
// a replaying load balancer would.
func (l *load) run(ctx context.Context, until time.Time) {
	var wg sync.WaitGroup
	for range l.cfg.workers {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(until) {
				n := l.next.Add(1)
				if l.cfg.requests > 0 && n > int64(l.cfg.requests) {
					return
				}
				key := fmt.Sprintf("%s-%d", l.runID, n)
				dups := 1 + l.rng.IntN(l.cfg.dups)
				var kw sync.WaitGroup
				for range dups {
					kw.Go(func() { l.send(ctx, key) })
				}
				kw.Wait()
			}
		})
	}
	wg.Wait()
}

// send is one logical request for key.
func (l *load) send(ctx context.Context, key string) {
	a := answer{key: key}
	began := time.Now()
	defer func() {
		a.took, a.received = time.Since(began), time.Now()
		l.mu.Lock()
		l.answers = append(l.answers, a)
		l.mu.Unlock()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+serviceHost+"/pay?ms="+strconv.FormatInt(l.cfg.handler.Milliseconds(), 10), strings.NewReader("pay "+key))
	if err != nil {
		a.err = err
		return
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := l.client.Do(req)
	if err != nil {
		a.err = err
		var ie *idemclient.Error
		if errors.As(err, &ie) {
			a.result.Attempts = ie.Attempts
		}
		return
	}
	defer resp.Body.Close()
	a.status = resp.StatusCode
	a.result, _ = idemclient.ResultOf(resp)
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.err = fmt.Errorf("reading the answer: %w", err)
		return
	}
	if a.status == http.StatusCreated {
		if err := json.Unmarshal(b, &a.exec); err != nil {
			a.err = fmt.Errorf("answer %q: %w", b, err)
		}
		return
	}
	a.err = fmt.Errorf("status %d: %s", a.status, strings.TrimSpace(string(b[:min(len(b), 200)])))
}
