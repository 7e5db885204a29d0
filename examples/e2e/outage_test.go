package e2e

import (
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/idemkit/idem/conformance"
)

// viaProxy rewrites rawURL's host to go through a new proxy.
func viaProxy(t *testing.T, rawURL string) (*conformance.Proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p := conformance.NewProxy(t, u.Host)
	u.Host = p.Addr()
	return p, u.String()
}

// viaProxyDSN rewrites a go-sql-driver DSN's address to go through a new
// proxy.
func viaProxyDSN(t *testing.T, dsn string) (*conformance.Proxy, string) {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := conformance.NewProxy(t, cfg.Addr)
	cfg.Addr = p.Addr()
	return p, cfg.FormatDSN()
}

// TestStoreOutage cuts the store away from a running fixture: requests
// fail closed with 503 within the store timeout, and once the server is
// back the same process recovers by itself.
func TestStoreOutage(t *testing.T) {
	t.Parallel() // it mostly waits (leases, timeouts): with the others at once
	const timeout = time.Second
	for _, store := range []string{"redis", "postgres", "mysql"} {
		for name, mode := range map[string]conformance.ProxyMode{"refuse": conformance.ProxyDown, "blackhole": conformance.ProxyBlackhole} {
			t.Run(store+"/"+name, func(t *testing.T) {
				t.Parallel() // each waits out store timeouts
				args := storeArgs(t, store)
				for i, a := range args {
					if a == "-redis-url" || a == "-postgres-url" || a == "-mysql-dsn" {
						var p *conformance.Proxy
						if a == "-mysql-dsn" {
							p, args[i+1] = viaProxyDSN(t, args[i+1])
						} else {
							p, args[i+1] = viaProxy(t, args[i+1])
						}
						outage(t, p, mode, append(args, "-store-timeout", timeout.String()), timeout)
						return
					}
				}
				t.Fatal("no store URL in the arguments")
			})
		}
	}
}

func outage(t *testing.T, p *conformance.Proxy, mode conformance.ProxyMode, args []string, timeout time.Duration) {
	f := start(t, "fixture", args...)
	if r := call(t, "POST", f.url+"/echo", "before", "x"); r.code != 201 {
		t.Fatalf("before the outage: %d %q", r.code, r.body)
	}
	p.Set(mode)
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
	p.Set(conformance.ProxyUp)
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
