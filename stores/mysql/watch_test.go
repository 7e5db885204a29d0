package mysqlstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
)

// A waiter is woken by a change made through another Store on the same
// table (another process) within about one poll interval, by a change
// through its own Store at once, and not by a failed change or a change
// of another key.
func TestWatch(t *testing.T) {
	s := newStore(t, nil, WithWatchInterval(20*time.Millisecond))
	s2, err := New(newDB(t, 2), WithTable(s.Table()), WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	ctx := t.Context()
	scope := claimAt("", "", "", t0, 0).Scope
	for _, tc := range []struct {
		name string
		via  *Store
		end  func(st *Store, key string) error
	}{
		{"complete elsewhere", s2, func(st *Store, key string) error {
			return st.Complete(ctx, hold(scope, key, "t"), completeAt(okResult, time.Now(), time.Now().Add(time.Hour)))
		}},
		{"release elsewhere", s2, func(st *Store, key string) error { return st.Release(ctx, hold(scope, key, "t")) }},
		{"delete elsewhere", s2, func(st *Store, key string) error {
			ok, err := st.Delete(ctx, ref(scope, key))
			if err == nil && !ok {
				err = errors.New("nothing deleted")
			}
			return err
		}},
		{"takeover elsewhere", s2, func(st *Store, key string) error {
			_, err := st.Claim(ctx, claimAt(key, "fp", "new", t0.Add(time.Hour), time.Hour))
			return err
		}},
		{"complete here", s, func(st *Store, key string) error {
			return st.Complete(ctx, hold(scope, key, "t"), completeAt(okResult, time.Now(), time.Now().Add(time.Hour)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "w-" + tc.name
			// The poller reads no clock: a claim whose lease ended by the
			// wall clock wakes nobody until it changes.
			c := claimAt(key, "fp", "t", t0, time.Hour)
			if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			ch, stop, err := s.Watch(ctx, ref(scope, key))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			bystander, stop2, err := s.Watch(ctx, ref(scope, key+"-other"))
			if err != nil {
				t.Fatal(err)
			}
			defer stop2()
			if fired(ch, 100*time.Millisecond) {
				t.Fatal("fired before the record changed")
			}
			if !fired(bystander, time.Second) {
				t.Fatal("a watch of a key without a record did not fire (spurious, but expected)")
			}
			// A failed completion (wrong token) wakes nobody.
			if err := tc.via.Complete(ctx, hold(scope, key, "wrong"), completeAt(okResult, t0, t0.Add(time.Hour))); !errors.Is(err, store.ErrLeaseLost) {
				t.Fatal(err)
			}
			if fired(ch, 100*time.Millisecond) {
				t.Fatal("fired on a failed completion")
			}
			start := time.Now()
			if err := tc.end(tc.via, key); err != nil {
				t.Fatal(err)
			}
			if !fired(ch, 5*time.Second) {
				t.Fatal("waiter not woken")
			}
			t.Logf("woken %v after the change", time.Since(start).Round(time.Millisecond))
		})
	}
}

// The poller runs only while there are watches, stops on Close, and
// Watch fails after Close.
func TestWatchStopsAndCloses(t *testing.T) {
	s := newStore(t, nil, WithWatchInterval(10*time.Millisecond))
	ctx := t.Context()
	scope := claimAt("", "", "", t0, 0).Scope
	if _, err := s.Claim(ctx, claimAt("k", "fp", "t", time.Now(), time.Hour)); err != nil {
		t.Fatal(err)
	}
	_, stop, err := s.Watch(ctx, ref(scope, "k"))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	stop()
	left := s.watch.Len()
	if left != 0 {
		t.Fatalf("%d keys watched after stop", left)
	}
	ch, _, err := s.Watch(ctx, ref(scope, "k"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop the poller")
	}
	if fired(ch, 50*time.Millisecond) {
		t.Log("(the open watch fired on close)")
	}
	if _, _, err := s.Watch(ctx, ref(scope, "k")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close = %v, want ErrClosed", err)
	}
}

// The background sweeper deletes expired rows on its own and stops on
// Close; Sweep stops when its context ends, and after Close.
func TestSweeper(t *testing.T) {
	s := newStore(t, nil, WithSweepInterval(20*time.Millisecond))
	ctx := t.Context()
	now := time.Now()
	for _, k := range []string{"a", "b"} {
		if _, err := s.Claim(ctx, claimAt(k, "fp", "t", now.Add(-time.Hour), time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Claim(ctx, claimAt("live", "fp", "t", now, time.Hour)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for count(t, s) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left; the sweeper did not run", count(t, s))
		}
		time.Sleep(20 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop the sweeper")
	}

	s2 := newStore(t, nil, WithSweepInterval(0))
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := s2.Sweep(sctx, 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sweep = %v", err)
	}
	s2.Close()
	if err := s2.Sweep(ctx, 10*time.Millisecond); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sweep after Close = %v", err)
	}
	if err := s2.Sweep(ctx, 0); err == nil {
		t.Fatal("Sweep with interval 0 succeeded")
	}
}

// The sweeper is on by default.
func TestSweeperDefault(t *testing.T) {
	s, err := New(newDB(t, 1), WithTable(randomTable()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.cfg.SweepInterval != DefaultSweepInterval {
		t.Fatalf("sweep interval %v, want %v", s.cfg.SweepInterval, DefaultSweepInterval)
	}
}
