package pgxstore

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// countingTracer counts the statements a pool runs.
type countingTracer struct {
	mu   sync.Mutex
	sqls []string
}

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	c.sqls = append(c.sqls, d.SQL)
	c.mu.Unlock()
	return ctx
}

func (*countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *countingTracer) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sqls
	c.sqls = nil
	return s
}

// TestStatementsPerStep fails if a change adds a round trip: a claim, a
// complete, a release and a replay are one statement each, with or
// without notifications. (pgx prepares each statement once per connection
// on first use; that is part of the same call and not counted here.)
func TestStatementsPerStep(t *testing.T) {
	for _, notify := range []bool{true, false} {
		t.Run("notify="+map[bool]string{true: "on", false: "off"}[notify], func(t *testing.T) {
			tr := &countingTracer{}
			var writes atomic.Int64
			p := newPool(t, func(c *pgxpool.Config) {
				c.MaxConns = 1
				c.ConnConfig.Tracer = tr
				c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
					conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					return &writeCounter{Conn: conn, n: &writes}, err
				}
			})
			s := newStore(t, p, WithNotify(notify))
			ctx := t.Context()
			scope := claimAt("", "", "", t0, 0).Scope
			steps := func(pass string) []step {
				a, b := "a"+pass, "b"+pass
				return []step{
					{"claim", func() error {
						res, err := s.Claim(ctx, claimAt(a, "fp", "t", t0, time.Minute))
						if err == nil && !res.Acquired {
							t.Error("not acquired")
						}
						return err
					}},
					{"complete", func() error {
						return s.Complete(ctx, hold(scope, a, "t"), completion(result(200), t0, t0.Add(time.Hour)))
					}},
					{"replay", func() error {
						res, err := s.Claim(ctx, claimAt(a, "fp", "u", t0, time.Minute))
						if err == nil && res.Acquired {
							t.Error("replay acquired")
						}
						return err
					}},
					{"claim b", func() error { _, err := s.Claim(ctx, claimAt(b, "fp", "t", t0, time.Minute)); return err }},
					{"409", func() error { _, err := s.Claim(ctx, claimAt(b, "fp", "u", t0, time.Minute)); return err }},
					{"release", func() error { return s.Release(ctx, hold(scope, b, "t")) }},
					{"expired takeover", func() error {
						res, err := s.Claim(ctx, claimAt(a, "fp", "v", t0.Add(2*time.Hour), time.Minute))
						if err == nil && !res.Acquired {
							t.Error("not acquired")
						}
						return err
					}},
				}
			}
			tr.take() // CreateSchema
			// The first pass also prepares each statement on the
			// connection (one more round trip, once per connection).
			for _, st := range steps("1") {
				if err := st.run(); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				if got := tr.take(); len(got) != 1 {
					t.Errorf("%s ran %d statements, want 1: %q", st.name, len(got), got)
				}
			}
			for _, st := range steps("2") {
				w0 := writes.Load()
				if err := st.run(); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				if got := tr.take(); len(got) != 1 {
					t.Errorf("%s ran %d statements, want 1: %q", st.name, len(got), got)
				}
				if n := writes.Load() - w0; n != 1 {
					t.Errorf("%s took %d round trips, want 1", st.name, n)
				}
			}
		})
	}
}

type step struct {
	name string
	run  func() error
}

// writeCounter counts the writes on a connection: pgx sends each
// statement's messages in one write and then waits for the answer, so
// writes are round trips.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (w *writeCounter) Write(b []byte) (int, error) {
	w.n.Add(1)
	return w.Conn.Write(b)
}

// TestStatementsExactlyOnce: BeginTx is one round trip (BEGIN and the
// lock of the record, in one batch), Commit two (the completion and
// COMMIT).
func TestStatementsExactlyOnce(t *testing.T) {
	tr := &countingTracer{}
	var writes atomic.Int64
	p := newPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.Tracer = tr
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return &writeCounter{Conn: conn, n: &writes}, err
		}
	})
	s := newStore(t, p).ExactlyOnce()
	ctx := t.Context()
	// The first pass prepares the statements on the connection.
	for _, key := range []string{"a", "b"} {
		c := claimAt(key, "fp", "t", t0, time.Minute)
		if _, err := s.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
		tr.take()
		w0 := writes.Load()
		tx, err := s.BeginTx(ctx, c.Hold())
		if err != nil {
			t.Fatal(err)
		}
		if n := writes.Load() - w0; key == "b" && n != 1 {
			t.Errorf("BeginTx took %d round trips, want 1", n)
		}
		if got := tr.take(); len(got) != 0 {
			t.Errorf("BeginTx ran %q outside its batch", got)
		}
		w0 = writes.Load()
		if err := tx.Commit(ctx, completion(result(200), t0, t0.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		if got := tr.take(); len(got) != 2 {
			t.Errorf("Commit ran %q", got)
		}
		if n := writes.Load() - w0; key == "b" && n != 2 {
			t.Errorf("Commit took %d round trips, want 2", n)
		}
	}
}
