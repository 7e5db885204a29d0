package mysqlstore

import (
	"context"
	"database/sql"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/core/store"
)

// dbAt returns a pool on the test database through addr, with no dial
// timeout of its own: the caller's context bounds every call.
func dbAt(t *testing.T, addr string) *sql.DB {
	t.Helper()
	return newDB(t, 4, func(c *mysql.Config) {
		c.Addr = addr
		c.Timeout = 0
	})
}

// New asks the server for max_allowed_packet: a server that is not there
// (a closed port, or a peer that accepts and never answers) makes it fail
// with an error that says so, within its 5-second bound. A store made
// while the server answered fails each call within the caller's deadline
// once it stops answering.
func TestUnreachableFailsPromptly(t *testing.T) {
	requireMySQL(t)
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
		t.Run("New/"+name, func(t *testing.T) {
			start := time.Now()
			s, err := New(dbAt(t, addr), WithLogger(quietLog))
			if err == nil {
				s.Close()
				t.Fatal("New succeeded against an unreachable server")
			}
			if d := time.Since(start); d > startTimeout+2*time.Second {
				t.Fatalf("New took %v to fail", d)
			}
			if !strings.Contains(err.Error(), "max_allowed_packet") {
				t.Errorf("New = %v, want an error that says what it could not ask", err)
			}
			t.Logf("New failed in %v: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}

	for name, mode := range map[string]conformance.ProxyMode{"refuse": conformance.ProxyDown, "blackhole": conformance.ProxyBlackhole} {
		t.Run("calls/"+name, func(t *testing.T) {
			px, s, _ := proxiedStore(t)
			px.Set(mode)
			for name, call := range map[string]func(context.Context) error{
				"claim": func(ctx context.Context) error {
					_, err := s.Claim(ctx, claimAt("k", "fp", "t", t0, time.Minute))
					return err
				},
				"begin": func(ctx context.Context) error {
					tx, err := s.ExactlyOnce().BeginTx(ctx, hold("s", "k", "t"))
					if err == nil {
						tx.Rollback(ctx)
					}
					return err
				},
				"now": func(ctx context.Context) error {
					_, err := s.Now(ctx)
					return err
				},
			} {
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				start := time.Now()
				err := call(ctx)
				cancel()
				if err == nil {
					t.Fatalf("%s succeeded against an unreachable server", name)
				}
				if d := time.Since(start); d > 2*time.Second {
					t.Fatalf("%s took %v to fail", name, d)
				}
				t.Logf("%s failed in %v: %v", name, time.Since(start).Round(time.Millisecond), err)
			}
		})
	}
}

// proxiedStore returns a store whose pool reaches the server through a
// proxy the test can cut, and a direct store on the same table that
// creates and drops it.
func proxiedStore(t *testing.T, opts ...Option) (px *conformance.Proxy, proxied, direct *Store) {
	t.Helper()
	requireMySQL(t)
	px = conformance.NewProxy(t, testConfig(t).Addr)
	direct = newStore(t, nil)
	proxied, err := New(dbAt(t, px.Addr()), append([]Option{WithTable(direct.Table()), WithLogger(quietLog)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxied.Close() })
	return px, proxied, direct
}

// The server goes away (refusing connections, or hanging) and comes back:
// calls fail within their deadline meanwhile, waiters are woken to poll,
// and the store works again by itself afterwards (database/sql drops the
// broken connections and dials new ones).
func TestOutageRecovery(t *testing.T) {
	for name, mode := range map[string]conformance.ProxyMode{"refuse": conformance.ProxyDown, "blackhole": conformance.ProxyBlackhole} {
		t.Run(name, func(t *testing.T) {
			px, s, direct := proxiedStore(t, WithWatchInterval(20*time.Millisecond))
			ctx := t.Context()
			scope := claimAt("", "", "", t0, 0).Scope
			if res, err := s.Claim(ctx, claimAt("a", "fp", "t", t0, time.Minute)); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			ch, stop, err := s.Watch(ctx, ref(scope, "a"))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			time.Sleep(100 * time.Millisecond) // the poller has seen the claim
			if fired(ch, 0) {
				t.Fatal("woken before the outage")
			}

			px.Set(mode)
			if !fired(ch, 5*time.Second) {
				t.Fatal("waiters not woken when the server went away")
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
			// Waiters are woken by another process's completion again.
			ch2, stop2, err := s.Watch(ctx, ref(scope, "a"))
			if err != nil {
				t.Fatal(err)
			}
			defer stop2()
			time.Sleep(100 * time.Millisecond)
			if err := direct.Complete(ctx, hold(scope, "a", "t"), completeAt(okResult, t0, t0.Add(time.Hour))); err != nil {
				t.Fatal(err)
			}
			if !fired(ch2, 5*time.Second) {
				t.Fatal("no wake-up after the outage")
			}
		})
	}
}

// freezer is a dialer whose connections stop delivering what the server
// sends while frozen: a server that hangs mid-conversation, without the
// connection being cut.
type freezer struct {
	mu     sync.Mutex
	frozen chan struct{} // closed while thawed
	armed  string        // freeze once a command containing this is sent
}

func (f *freezer) arm(cmd string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = cmd
}

func (f *freezer) sent(b []byte) {
	f.mu.Lock()
	armed := f.armed
	f.mu.Unlock()
	if armed != "" && strings.Contains(string(b), armed) {
		f.arm("")
		f.set(true)
	}
}

func newFreezer() *freezer {
	f := &freezer{frozen: make(chan struct{})}
	close(f.frozen)
	return f
}

func (f *freezer) set(frozen bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if frozen {
		f.frozen = make(chan struct{})
	} else {
		select {
		case <-f.frozen:
		default:
			close(f.frozen)
		}
	}
}

func (f *freezer) thawed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen
}

type frozenConn struct {
	net.Conn
	f      *freezer
	closed chan struct{}
	once   *sync.Once
}

func (c frozenConn) Read(b []byte) (int, error) {
	select {
	case <-c.f.thawed():
		return c.Conn.Read(b)
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

func (c frozenConn) Write(b []byte) (int, error) {
	c.f.sent(b)
	return c.Conn.Write(b)
}

func (c frozenConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// An exactly-once transaction whose server hangs at COMMIT: Commit (and
// Rollback) return within their deadline, although database/sql and the
// driver do not bound COMMIT by a context, and the abandoned COMMIT ends
// by itself once the server answers.
func TestHungCommitReturnsInTime(t *testing.T) {
	f := newFreezer()
	db := newDB(t, 2, func(c *mysql.Config) {
		c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return frozenConn{conn, f, make(chan struct{}), new(sync.Once)}, nil
		}
	})
	s := newStore(t, db, WithSweepInterval(0))
	ctx := t.Context()
	eo := s.ExactlyOnce()
	for _, end := range []string{"commit", "rollback"} {
		c := claimAt(end, "fp", "t", t0, time.Minute)
		if res, err := eo.Claim(ctx, c); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		tx, err := eo.BeginTx(ctx, c.Hold())
		if err != nil {
			t.Fatal(err)
		}
		f.arm(strings.ToUpper(end)) // the server hangs once it has COMMIT or ROLLBACK
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		if end == "commit" {
			err = tx.Commit(cctx, completeAt(result("\x01created", ""), t0, t0.Add(time.Hour)))
		} else {
			err = tx.Rollback(cctx)
		}
		cancel()
		took := time.Since(start)
		f.set(false)
		if err == nil {
			t.Fatalf("%s through a hung server succeeded", end)
		}
		if took > 2*time.Second {
			t.Fatalf("%s took %v to fail", end, took)
		}
		t.Logf("%s failed in %v: %v", end, took.Round(time.Millisecond), err)
		// The abandoned COMMIT ends once the server answers: the record
		// is completed, as it may be after any failed COMMIT.
		want := map[string]store.State{"commit": store.Completed, "rollback": store.InProgress}[end]
		deadline := time.Now().Add(5 * time.Second)
		for {
			rec, ok, err := s.Get(ctx, c.Ref(), t0)
			if err == nil && ok && rec.State == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the %s: %+v %v %v", end, rec, ok, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The pool works again.
	if _, err := eo.Claim(ctx, claimAt("after", "fp", "t", t0, time.Minute)); err != nil {
		t.Fatal(err)
	}
}

func fired(ch <-chan struct{}, within time.Duration) bool {
	if within == 0 {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	select {
	case <-ch:
		return true
	case <-time.After(within):
		return false
	}
}
