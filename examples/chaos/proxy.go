package main

import (
	"io"
	"net"
	"sync"
)

// proxyMode is the state of a proxy.
type proxyMode int

const (
	proxyUp        proxyMode = iota // forwards every connection
	proxyDown                       // refuses new connections: a stopped server
	proxyBlackhole                  // accepts connections and never answers: a hung server or a partition
)

// proxy is a TCP proxy on loopback between one fixture instance and the
// store, after conformance.Proxy (which needs a testing.TB): every change
// of mode cuts the open connections, and it listens on the same address
// for its whole life.
type proxy struct {
	target string
	addr   string

	mu     sync.Mutex
	mode   proxyMode
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
}

// newProxy starts a proxy to target (host:port) on a free loopback port.
func newProxy(target string) (*proxy, error) {
	p := &proxy{target: target, conns: map[net.Conn]struct{}{}}
	if err := p.listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	return p, nil
}

// set switches the mode and cuts every open connection. Going down, the
// listener closes before the cut, so a client that reconnects at once is
// refused rather than caught half-way.
func (p *proxy) set(mode proxyMode) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.mode = mode
	ln := p.ln
	if mode == proxyDown {
		p.ln = nil
	}
	p.mu.Unlock()
	if mode == proxyDown && ln != nil {
		ln.Close()
	}
	p.cut()
	if mode != proxyDown && ln == nil {
		return p.listen(p.addr)
	}
	return nil
}

// cut closes every open connection.
func (p *proxy) cut() {
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
}

// close stops the proxy for good.
func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	ln := p.ln
	p.ln = nil
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	p.cut()
}

func (p *proxy) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go p.accept(ln)
	return nil
}

func (p *proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		if mode == proxyDown || p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		if mode == proxyUp {
			go p.pipe(c)
		}
		// Blackholed, the connection is held, unanswered, until the mode
		// changes.
	}
}

func (p *proxy) pipe(c net.Conn) {
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
