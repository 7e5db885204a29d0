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

// TestRoundTripsExactlyOnce: ClaimTx on a free key is five statements at
// READ COMMITTED (the read, autocommit off with the user-level lock, SET
// TRANSACTION, START TRANSACTION, the claim) and four at the server's
// default, and the first on a store also prepares the completion; a
// replay is the read alone. BeginTx, for a claim Claim committed, is four
// at READ COMMITTED (the lock, SET TRANSACTION, START TRANSACTION, the
// mark) and three at the server's default. Commit is three either way
// (the completion, COMMIT, autocommit on with the lock released).
func TestRoundTripsExactlyOnce(t *testing.T) {
	var writes atomic.Int64
	s := newStore(t, newDB(t, 1, countingDB(t, &writes)), WithSweepInterval(0))
	ctx := t.Context()
	count := func(name string, want int64, f func() error) {
		t.Helper()
		w0 := writes.Load()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := writes.Load() - w0; n != want {
			t.Errorf("%s took %d round trips, want %d", name, n, want)
		}
	}
	for i, tc := range []struct {
		name  string
		s     *ExactlyOnceStore
		claim int64 // ClaimTx
		begin int64 // BeginTx
	}{
		{"read committed, first", s.ExactlyOnce(), 6, 4},
		{"read committed", s.ExactlyOnce(), 5, 4},
		{"server default", s.ExactlyOnce().WithTxOptions(sql.TxOptions{}), 4, 3},
	} {
		c := claimAt(fmt.Sprint("c", i), "fp", "t", t0, time.Minute)
		var tx store.Tx
		count(tc.name+": ClaimTx", tc.claim, func() (err error) {
			_, tx, err = tc.s.ClaimTx(ctx, c)
			return err
		})
		count(tc.name+": Commit after ClaimTx", 3, func() error { return tx.Commit(ctx, completeAt(okResult, t0, t0.Add(time.Hour))) })
		count(tc.name+": ClaimTx of a completed key", 1, func() error {
			res, tx, err := tc.s.ClaimTx(ctx, c)
			if err == nil && (res.Acquired || tx != nil) {
				err = fmt.Errorf("a replay acquired the key")
			}
			return err
		})
		c = claimAt(fmt.Sprint("b", i), "fp", "t", t0, time.Minute)
		if _, err := tc.s.Claim(ctx, c); err != nil {
			t.Fatal(err)
		}
		count(tc.name+": BeginTx", tc.begin, func() (err error) {
			tx, err = tc.s.BeginTx(ctx, c.Hold())
			return err
		})
		count(tc.name+": Commit after BeginTx", 3, func() error { return tx.Commit(ctx, completeAt(okResult, t0, t0.Add(time.Hour))) })
	}
}
