package pgxstore

import (
	"context"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

func poolAt(t *testing.T, addr string) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(testURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 0 // the caller's ctx bounds each call
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// A store whose server is unreachable (a closed port, or a peer that
// accepts and never answers) fails within the caller's deadline.
func TestUnreachableFailsPromptly(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never answers
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()

	for name, addr := range map[string]string{"closed port": closedAddr, "silent peer": silent.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			s, err := New(poolAt(t, addr))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err = s.Claim(ctx, claimAt("k", "fp", "t", t0, time.Minute))
			if err == nil {
				t.Fatal("claim succeeded against an unreachable server")
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("claim took %v to fail", d)
			}
			t.Logf("failed in %v: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}

// newProxy returns a proxy to the test server that can be cut away and
// brought back, standing in for a PostgreSQL restart.
func newProxy(t *testing.T) *conformance.Proxy {
	u, err := url.Parse(testURL())
	if err != nil {
		t.Fatal(err)
	}
	return conformance.NewProxy(t, u.Host)
}

// proxiedStore returns a store whose pool and listener reach PostgreSQL
// through a proxy the test can cut, with a fast listener backoff; the
// table is created and dropped by direct, a store on the test pool.
func proxiedStore(t *testing.T) (px *conformance.Proxy, proxied, direct *Store) {
	t.Helper()
	b := listenerBackoff
	listenerBackoff = 20 * time.Millisecond
	t.Cleanup(func() { listenerBackoff = b })
	px = newProxy(t)
	direct = newStore(t, nil) // creates and drops the table
	proxied, err := New(poolAt(t, px.Addr()), WithTable(direct.Table()), WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxied.Close() })
	return px, proxied, direct
}

// The server goes away and comes back: calls fail within their deadline
// meanwhile, and the store works again by itself afterwards (the pool
// drops broken connections, the listener reconnects and wakes watchers).
func TestOutageRecovery(t *testing.T) {
	requirePostgres(t)
	px, s, direct := proxiedStore(t)
	ctx := t.Context()
	scope := claimAt("", "", "", t0, 0).Scope
	if res, err := s.Claim(ctx, claimAt("a", "fp", "t", t0, time.Minute)); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	listening(t, s)
	ch, stop, err := s.Watch(ctx, ref(scope, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	px.Set(conformance.ProxyDown)
	if !fired(ch, 5*time.Second) {
		t.Fatal("watchers not woken when the server went away")
	}
	for i := range 3 {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		_, err := s.Claim(cctx, claimAt("b", "fp", "t", t0, time.Minute))
		cancel()
		if err == nil {
			t.Fatalf("claim %d succeeded during the outage", i)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("claim %d took %v to fail", i, d)
		}
	}

	px.Set(conformance.ProxyUp)
	var res store.ClaimResult
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		res, err = s.Claim(cctx, claimAt("a", "fp", "u", t0, time.Minute))
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || res.Acquired || res.Existing.State != store.InProgress {
		t.Fatalf("after the outage: %+v %v", res, err)
	}
	// The listener is back too.
	var ch2 <-chan struct{}
	waitUp(t, s)
	ch2, stop2, err := s.Watch(ctx, ref(scope, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	if err := direct.Complete(ctx, hold(scope, "a", "t"), completion(result(200), t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if !fired(ch2, 5*time.Second) {
		t.Fatal("no notification after the outage")
	}
}
