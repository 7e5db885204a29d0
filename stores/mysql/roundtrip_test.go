package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/idemkit/idem/core/store"
)

// writeCounter counts the writes on a connection: the driver sends each
// command in one write and then waits for the answer, so writes are round
// trips.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (w *writeCounter) Write(b []byte) (int, error) {
	w.n.Add(1)
	return w.Conn.Write(b)
}

func countingDB(t *testing.T, writes *atomic.Int64) func(*mysql.Config) {
	return func(c *mysql.Config) {
		c.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			return &writeCounter{Conn: conn, n: writes}, err
		}
	}
}

// TestRoundTripsPerStep fails if a change adds a round trip: a replay, a
// 409, a complete, a release, an extend, a get, an evict and a delete are
// one statement each; a claim that takes a key is two (the read, the
// upsert), three when it takes over an in-progress claim whose lease
// ended (it asks whether a transaction holds it first). Complete is a
// prepared statement: preparing it on the connection costs one more
// round trip, once.
func TestRoundTripsPerStep(t *testing.T) {
	var writes atomic.Int64
	s := newStore(t, newDB(t, 1, countingDB(t, &writes)), WithSweepInterval(0))
	ctx := t.Context()
	scope := claimAt("", "", "", t0, 0).Scope
	// Prepare the completion on the pool's one connection.
	if _, err := s.Claim(ctx, claimAt("warm", "fp", "t", t0, time.Minute)); err != nil {
		t.Fatal(err)
	}
	w0 := writes.Load()
	if err := s.Complete(ctx, hold(scope, "warm", "t"), completeAt(okResult, t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if n := writes.Load() - w0; n != 2 {
		t.Errorf("the first complete took %d round trips, want 2 (prepare, execute)", n)
	}
	for _, st := range []struct {
		name string
		want int64
		run  func() error
	}{
		{"claim", 2, func() error {
			res, err := s.Claim(ctx, claimAt("a", "fp", "t", t0, time.Minute))
			if err == nil && !res.Acquired {
				t.Error("not acquired")
			}
			return err
		}},
		{"409", 1, func() error { _, err := s.Claim(ctx, claimAt("a", "fp", "u", t0, time.Minute)); return err }},
		{"extend", 1, func() error { return s.Extend(ctx, hold(scope, "a", "t"), t0, t0.Add(2*time.Minute)) }},
		{"complete", 1, func() error {
			return s.Complete(ctx, hold(scope, "a", "t"), completeAt(store.Result{Head: okResult.Head, Body: make([]byte, 64<<10)}, t0, t0.Add(time.Hour)))
		}},
		{"replay", 1, func() error {
			res, err := s.Claim(ctx, claimAt("a", "fp", "u", t0, time.Minute))
			if err == nil && res.Acquired {
				t.Error("replay acquired")
			}
			return err
		}},
		{"422", 1, func() error { _, err := s.Claim(ctx, claimAt("a", "other", "u", t0, time.Minute)); return err }},
		{"get", 1, func() error { _, _, err := s.Get(ctx, ref(scope, "a"), t0); return err }},
		{"claim b", 2, func() error { _, err := s.Claim(ctx, claimAt("b", "fp", "t", t0, time.Minute)); return err }},
		{"release", 1, func() error { return s.Release(ctx, hold(scope, "b", "t")) }},
		{"expired takeover", 2, func() error {
			res, err := s.Claim(ctx, claimAt("a", "fp", "v", t0.Add(2*time.Hour), time.Minute))
			if err == nil && !res.Acquired {
				t.Error("not acquired")
			}
			return err
		}},
		{"delete", 1, func() error { _, err := s.Delete(ctx, ref(scope, "a")); return err }},
		{"claim c", 2, func() error { _, err := s.Claim(ctx, claimAt("c", "fp", "t", t0, time.Minute)); return err }},
		{"abandoned takeover", 3, func() error {
			res, err := s.Claim(ctx, claimAt("c", "fp", "v", t0.Add(2*time.Minute), time.Minute))
			if err == nil && !res.Acquired {
				t.Error("not acquired")
			}
			return err
		}},
		{"evict", 1, func() error { return s.Evict(ctx, hold(scope, "c", "v")) }},
		{"now", 1, func() error { _, err := s.Now(ctx); return err }},
	} {
		w0 := writes.Load()
		if err := st.run(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if n := writes.Load() - w0; n != st.want {
			t.Errorf("%s took %d round trips, want %d", st.name, n, st.want)
		}
	}
}

// TestRoundTripsExactlyOnce: BeginTx is four statements at READ
// COMMITTED (autocommit off with the user-level lock, SET TRANSACTION,
// START TRANSACTION, the mark) and three at the server's default; Commit
// is three (the completion, COMMIT, autocommit on with the lock
// released). The first BeginTx also prepares the completion.
func TestRoundTripsExactlyOnce(t *testing.T) {
	var writes atomic.Int64
	s := newStore(t, newDB(t, 1, countingDB(t, &writes)), WithSweepInterval(0))
	ctx := t.Context()
	for i, tc := range []struct {
		name  string
		s     *ExactlyOnceStore
		begin int64
	}{
		{"read committed, first", s.ExactlyOnce(), 5},
		{"read committed", s.ExactlyOnce(), 4},
		{"server default", s.ExactlyOnce().WithTxOptions(sql.TxOptions{}), 3},
	} {
		c := claimAt(fmt.Sprint("k", i), "fp", "t", t0, time.Minute)
		if _, err := tc.s.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
		w0 := writes.Load()
		tx, err := tc.s.BeginTx(ctx, c.Hold())
		if err != nil {
			t.Fatal(err)
		}
		if n := writes.Load() - w0; n != tc.begin {
			t.Errorf("%s: BeginTx took %d round trips, want %d", tc.name, n, tc.begin)
		}
		w0 = writes.Load()
		if err := tx.Commit(ctx, completeAt(okResult, t0, t0.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		if n := writes.Load() - w0; n != 3 {
			t.Errorf("%s: Commit took %d round trips, want 3", tc.name, n)
		}
	}
}
