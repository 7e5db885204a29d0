package conformance

import (
	"io"
	"net"
	"sync"
	"testing"
)

// ProxyMode is the state of a Proxy.
type ProxyMode int

const (
	// ProxyUp forwards every connection.
	ProxyUp ProxyMode = iota
	// ProxyDown refuses new connections and cuts open ones: a stopped
	// server.
	ProxyDown
	// ProxyBlackhole accepts connections and never answers, and cuts open
	// ones: a hung server or a partition.
	ProxyBlackhole
)

// Proxy is a TCP proxy on loopback for store outage tests: point a store's
// client at Addr, then cut the server away with Set and bring it back.
// It listens on the same address for its whole life.
type Proxy struct {
	t      testing.TB
	target string
	addr   string

	mu    sync.Mutex
	mode  ProxyMode
	ln    net.Listener
	conns map[net.Conn]struct{}
}

// NewProxy starts a proxy to target (host:port) on a free loopback port;
// it stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{t: t, target: target, conns: map[net.Conn]struct{}{}}
	p.listen("127.0.0.1:0")
	t.Cleanup(func() { p.Set(ProxyDown) })
	return p
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Set switches the proxy's mode; every open connection is cut. Going
// down, the listener closes before the cut, so a client that reconnects at
// once is refused rather than caught half-way.
func (p *Proxy) Set(mode ProxyMode) {
	p.mu.Lock()
	p.mode = mode
	ln := p.ln
	if mode == ProxyDown {
		p.ln = nil
	}
	p.mu.Unlock()
	if mode == ProxyDown && ln != nil {
		ln.Close()
	}
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	if mode != ProxyDown && ln == nil {
		p.listen(p.addr)
	}
}

func (p *Proxy) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatalf("conformance: proxy listening on %s: %v", addr, err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go p.accept(ln)
}

func (p *Proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		if mode == ProxyDown {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		if mode == ProxyUp {
			go p.pipe(c)
		}
		// In ProxyBlackhole the connection is held, unanswered, until the
		// mode changes.
	}
}

func (p *Proxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if _, ok := p.conns[c]; !ok { // cut while dialling
		p.mu.Unlock()
		s.Close()
		return
	}
	p.conns[s] = struct{}{}
	p.mu.Unlock()
	go func() { io.Copy(s, c); s.Close() }()
	io.Copy(c, s)
	c.Close()
}
