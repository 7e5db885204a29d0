// Package flaky is a fault-injecting HTTP/1.1 proxy on loopback, for
// tests and demos of clients that retry. It forwards each request to one
// target and, by chance, loses the response after the server handled the
// request, resets the connection before forwarding, or holds the request
// for a while first:
//
//	p, err := flaky.New(flaky.Config{Target: "127.0.0.1:8080", Drop: 0.2, Seed: 1})
//	defer p.Close()
//	resp, err := client.Post(p.URL()+"/orders", "application/json", body)
//
// A dropped response is read in full from the server before the client's
// connection is closed without it (a FIN, so the client sees EOF): the
// handler ran and, behind idem, its response is stored, so the client's
// retry must be a replay. A reset (RST, with SetLinger(0)) happens after
// the request is read and before it is forwarded: the server never sees
// it. Each client connection gets its own connection to the target. The
// decisions come from a random source seeded with Config.Seed, drawn in
// the order requests arrive. Responses are buffered whole, so the proxy
// suits tests, not large downloads. Stats counts what it did. Close stops
// it: the listener, every connection and every delay.
package flaky

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Config says where the proxy forwards and how often it misbehaves. Each
// probability is per request, from 0 (never) to 1 (always).
type Config struct {
	// Target is the host:port of the server to forward to.
	Target string
	// Drop is the probability that the response is read from the server
	// and then lost: the client's connection is closed without it.
	Drop float64
	// Reset is the probability that the client's connection is reset
	// before the request is forwarded. Drop+Reset must not exceed 1.
	Reset float64
	// Delay is the probability that the request is held for DelayTime
	// before anything else happens to it.
	Delay float64
	// DelayTime is how long a delayed request is held. Default: 100ms.
	DelayTime time.Duration
	// Seed seeds the random decisions.
	Seed uint64
}

// Stats counts what the proxy did. Requests is the sum of the other
// fields but Delayed.
type Stats struct {
	Requests  int64 // requests read from clients
	Forwarded int64 // responses passed on to the client
	Dropped   int64 // responses read from the server and not passed on
	Reset     int64 // connections reset before forwarding
	Failed    int64 // requests the target could not be reached or answer for
	Delayed   int64 // requests held for DelayTime (also counted above)
}

// Proxy is a running fault-injecting proxy. Its methods are safe for
// concurrent use.
type Proxy struct {
	cfg  Config
	ln   net.Listener
	done chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	rng   *rand.Rand
	conns map[net.Conn]struct{}
	shut  bool

	requests, forwarded, dropped, reset, failed, delayed atomic.Int64
}

// New starts a proxy to cfg.Target on a free port of 127.0.0.1.
func New(cfg Config) (*Proxy, error) {
	switch {
	case cfg.Target == "":
		return nil, errors.New("flaky: no target")
	case !prob(cfg.Drop) || !prob(cfg.Reset) || !prob(cfg.Delay):
		return nil, fmt.Errorf("flaky: probabilities must be from 0 to 1 (drop %v, reset %v, delay %v)", cfg.Drop, cfg.Reset, cfg.Delay)
	case cfg.Drop+cfg.Reset > 1:
		return nil, fmt.Errorf("flaky: drop %v + reset %v is more than 1", cfg.Drop, cfg.Reset)
	case cfg.DelayTime < 0:
		return nil, fmt.Errorf("flaky: negative delay time %v", cfg.DelayTime)
	}
	if cfg.DelayTime == 0 {
		cfg.DelayTime = 100 * time.Millisecond
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg: cfg, ln: ln, done: make(chan struct{}),
		rng:   newRand(cfg.Seed),
		conns: map[net.Conn]struct{}{},
	}
	p.wg.Go(p.accept)
	return p, nil
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func prob(x float64) bool { return x >= 0 && x <= 1 }

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL returns "http://" and the proxy's host:port.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	return Stats{
		Requests: p.requests.Load(), Forwarded: p.forwarded.Load(), Dropped: p.dropped.Load(),
		Reset: p.reset.Load(), Failed: p.failed.Load(), Delayed: p.delayed.Load(),
	}
}

// Close stops the proxy: it closes the listener and every connection,
// ends every delay, and returns once all its goroutines have.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.shut {
		p.mu.Unlock()
		return nil
	}
	p.shut = true
	close(p.done)
	err := p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

// track registers c so Close can cut it; false once the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

type fault int

const (
	forward fault = iota
	drop
	reset
)

// decide draws what happens to the next request.
func (p *Proxy) decide() (f fault, delay bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.rng.Float64()
	switch {
	case u < p.cfg.Reset:
		f = reset
	case u < p.cfg.Reset+p.cfg.Drop:
		f = drop
	}
	return f, p.rng.Float64() < p.cfg.Delay
}

// serve proxies the requests of one client connection, in order, over one
// connection to the target opened on the first request.
func (p *Proxy) serve(c net.Conn) {
	defer p.untrack(c)
	br := bufio.NewReader(c)
	var up net.Conn
	var upr *bufio.Reader
	defer func() {
		if up != nil {
			p.untrack(up)
		}
	}()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return // the client closed the connection, or the proxy did
		}
		p.requests.Add(1)
		f, delay := p.decide()
		if delay {
			p.delayed.Add(1)
			t := time.NewTimer(p.cfg.DelayTime)
			select {
			case <-t.C:
			case <-p.done:
				t.Stop()
				return
			}
		}
		if f == reset {
			io.Copy(io.Discard, req.Body)
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // Close sends RST
			}
			p.reset.Add(1)
			return
		}
		if up == nil {
			d := net.Dialer{Timeout: 5 * time.Second}
			if up, err = d.Dial("tcp", p.cfg.Target); err != nil || !p.track(up) {
				up = nil
				p.failed.Add(1)
				return
			}
			upr = bufio.NewReader(up)
		}
		resp, body, err := roundTrip(up, upr, req)
		if err != nil {
			p.failed.Add(1)
			return
		}
		if f == drop {
			p.dropped.Add(1)
			return // the server handled it; the client never hears
		}
		resp.Body, resp.ContentLength, resp.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
		// Counted before the write, so a client that has its answer sees
		// it in Stats; a write that fails moves it to failed.
		p.forwarded.Add(1)
		if err := resp.Write(c); err != nil {
			p.forwarded.Add(-1)
			p.failed.Add(1)
			return
		}
		if resp.Close || req.Close {
			return
		}
	}
}

// roundTrip forwards req over up and reads the whole response.
func roundTrip(up net.Conn, upr *bufio.Reader, req *http.Request) (*http.Response, []byte, error) {
	if err := req.Write(up); err != nil {
		return nil, nil, err
	}
	resp, err := http.ReadResponse(upr, req)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, body, err
}
