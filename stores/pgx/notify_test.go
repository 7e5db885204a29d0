package pgxstore

import (
	"errors"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/jackc/pgx/v5/pgxpool"
)

func fired(ch <-chan struct{}, within time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(within):
		return false
	}
}

func TestWatch(t *testing.T) {
	p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 3 })
	s := newStore(t, p)
	other := newPool(t) // a second instance on the same table
	s2, err := New(other, WithTable(s.Table()))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	ctx := t.Context()
	scope := claimAt("", "", "", t0, 0).Scope

	for _, tc := range []struct {
		name string
		end  func(key string) error
	}{
		{"complete", func(key string) error {
			return s2.Complete(ctx, scope, key, "t", idem.Response{Status: 200}, t0, t0.Add(time.Hour))
		}},
		{"release", func(key string) error { return s2.Release(ctx, scope, key, "t") }},
		{"delete", func(key string) error {
			ok, err := s2.Delete(ctx, scope, key)
			if err == nil && !ok {
				err = errors.New("nothing deleted")
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "w-" + tc.name
			if res, err := s.Claim(ctx, claimAt(key, "fp", "t", t0, time.Minute)); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			ch, stop, err := s.Watch(ctx, scope, key)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			bystander, stop2, err := s.Watch(ctx, scope, key+"-other")
			if err != nil {
				t.Fatal(err)
			}
			defer stop2()
			if fired(ch, 50*time.Millisecond) {
				t.Fatal("fired before the record changed")
			}
			// A failed completion (wrong token) notifies nobody.
			if err := s2.Complete(ctx, scope, key, "wrong", idem.Response{Status: 200}, t0, t0.Add(time.Hour)); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatal(err)
			}
			if fired(ch, 100*time.Millisecond) {
				t.Fatal("fired on a failed completion")
			}
			if err := tc.end(key); err != nil {
				t.Fatal(err)
			}
			if !fired(ch, 5*time.Second) {
				t.Fatal("watcher not woken")
			}
			if fired(bystander, 100*time.Millisecond) {
				t.Fatal("watcher of another key woken")
			}
		})
	}
	// The listener's connection left the pool: the pool can still open
	// all of its MaxConns.
	if got := p.Stat().MaxConns(); got != 3 {
		t.Fatalf("MaxConns = %d", got)
	}
	conns := make([]*pgxpool.Conn, 0, 3)
	for range 3 {
		c, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// When the listener's connection dies, every watcher is woken (so the
// engine polls), the listener reconnects by itself, and notifications flow
// again.
func TestWatchListenerReconnects(t *testing.T) {
	defer func(b time.Duration) { listenerBackoff = b }(listenerBackoff)
	listenerBackoff = 20 * time.Millisecond
	s := newStore(t, nil, WithLogger(quietLog))
	ctx := t.Context()
	scope := claimAt("", "", "", t0, 0).Scope
	if res, err := s.Claim(ctx, claimAt("k", "fp", "t", t0, time.Minute)); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	ch, stop, err := s.Watch(ctx, scope, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	kill := func() int {
		var n int
		err := s.db.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND query = $1`, "LISTEN "+quoted(s.channel)).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := kill(); n != 1 {
		t.Fatalf("terminated %d listeners, want 1", n)
	}
	if !fired(ch, 5*time.Second) {
		t.Fatal("watchers not woken when the listener dropped")
	}
	// Wait until the listener is back (a new Watch waits for it).
	var back bool
	for range 100 {
		if l := s.listener; l.readyChan() == nil {
			back = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !back {
		t.Fatal("listener did not reconnect")
	}
	ch, stop, err = s.Watch(ctx, scope, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if fired(ch, 50*time.Millisecond) {
		t.Fatal("spurious wake after reconnect")
	}
	if err := s.Complete(ctx, scope, "k", "t", idem.Response{Status: 200}, t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !fired(ch, 5*time.Second) {
		t.Fatal("no notification after reconnect")
	}
}

func TestWatchDisabledAndClosed(t *testing.T) {
	s := newStore(t, nil, WithNotify(false))
	ctx := t.Context()
	scope := claimAt("", "", "", t0, 0).Scope
	if res, err := s.Claim(ctx, claimAt("k", "fp", "t", t0, time.Minute)); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	ch, stop, err := s.Watch(ctx, scope, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := s.Complete(ctx, scope, "k", "t", idem.Response{Status: 200}, t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if fired(ch, 100*time.Millisecond) {
		t.Fatal("fired with notifications off")
	}
	s.Close()
	if _, _, err := s.Watch(ctx, scope, "k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close = %v", err)
	}
}

// Close stops the listener: its backend disappears.
func TestCloseStopsListener(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	_, stop, err := s.Watch(ctx, "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	stop()
	count := func() int {
		var n int
		if err := s.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, "LISTEN "+quoted(s.channel)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("%d listeners, want 1", n)
	}
	s.Close()
	for range 100 {
		if count() == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("listener still connected after Close")
}
