package e2e

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"
)

// proxy forwards TCP connections to a server and can cut them: "refuse"
// closes every connection at once (a stopped server), "blackhole" accepts
// and never answers (a hung server or a partition).
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	mode   string // "", "refuse" or "blackhole"
	conns  map[net.Conn]struct{}
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { ln.Close(); p.set("refuse") })
	go p.serve()
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		mode := p.mode
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		switch mode {
		case "refuse":
			c.Close()
		case "blackhole":
			// Held open, never answered; closed when the mode changes.
		default:
			go p.pipe(c)
		}
	}
}

func (p *proxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[s] = struct{}{}
	p.mu.Unlock()
	go func() { io.Copy(s, c); s.Close() }()
	io.Copy(c, s)
	c.Close()
}

// set changes the mode and drops every open connection.
func (p *proxy) set(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = mode
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// viaProxy rewrites rawURL's host to go through a new proxy.
func viaProxy(t *testing.T, rawURL string) (*proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	return p, u.String()
}

// TestStoreOutage cuts the store away from a running fixture: requests
// fail closed with 503 within the store timeout, and once the server is
// back the same process recovers by itself.
func TestStoreOutage(t *testing.T) {
	const timeout = time.Second
	for _, store := range []string{"redis", "postgres"} {
		for _, mode := range []string{"refuse", "blackhole"} {
			t.Run(store+"/"+mode, func(t *testing.T) {
				args := storeArgs(t, store)
				for i, a := range args {
					if a == "-redis-url" || a == "-postgres-url" {
						var p *proxy
						p, args[i+1] = viaProxy(t, args[i+1])
						outage(t, p, mode, append(args, "-store-timeout", timeout.String()), timeout)
						return
					}
				}
				t.Fatal("no store URL in the arguments")
			})
		}
	}
}

func outage(t *testing.T, p *proxy, mode string, args []string, timeout time.Duration) {
	f := start(t, "fixture", args...)
	if r := call(t, "POST", f.url+"/echo", "before", "x"); r.code != 201 {
		t.Fatalf("before the outage: %d %q", r.code, r.body)
	}
	p.set(mode)
	for i := 0; i < 3; i++ {
		began := time.Now()
		r := call(t, "POST", f.url+"/echo", "during-"+strconv.Itoa(i), "x")
		took := time.Since(began)
		if r.code != 503 || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("during the outage: %d %v %q, want 503 problem with Retry-After", r.code, r.header, r.body)
		}
		// Bounded by the store timeout (generous slack for a loaded machine).
		if took > timeout+3*time.Second {
			t.Errorf("503 after %v, store timeout %v", took, timeout)
		}
	}
	if n := counter(t, f); n != 1 {
		t.Errorf("handler ran %d times; during an outage it must not run", n)
	}
	p.set("")
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := call(t, "POST", f.url+"/echo", "after", "x")
		if r.code == 201 {
			break
		}
		if r.code != 503 || time.Now().After(deadline) {
			t.Fatalf("after the outage: %d %q", r.code, r.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := call(t, "POST", f.url+"/echo", "before", "x"); !r.replayed() {
		t.Errorf("a record from before the outage is not replayed: %d", r.code)
	}
}
