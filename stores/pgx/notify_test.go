package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5"
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

// listening starts s's listener and waits until it is up, so a watch
// taken afterwards is not woken by the listener coming up.
func listening(t *testing.T, s *Store) {
	t.Helper()
	_, stop, err := s.Watch(t.Context(), ref("", ""))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	waitUp(t, s)
}

func waitUp(t *testing.T, s *Store) {
	t.Helper()
	for range 500 {
		if s.listener.isUp() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("listener not up after 5s")
}

// closedNow reports whether ch is closed (or has a value) right now.
func closedNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
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
	listening(t, s)

	for _, tc := range []struct {
		name string
		end  func(key string) error
	}{
		{"complete", func(key string) error {
			return s2.Complete(ctx, hold(scope, key, "t"), completion(result(200), t0, t0.Add(time.Hour)))
		}},
		{"release", func(key string) error { return s2.Release(ctx, hold(scope, key, "t")) }},
		{"delete", func(key string) error {
			ok, err := s2.Delete(ctx, ref(scope, key))
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
			if fired(ch, 50*time.Millisecond) {
				t.Fatal("fired before the record changed")
			}
			// A failed completion (wrong token) notifies nobody.
			if err := s2.Complete(ctx, hold(scope, key, "wrong"), completion(result(200), t0, t0.Add(time.Hour))); !errors.Is(err, store.ErrLeaseLost) {
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
	listening(t, s)
	ch, stop, err := s.Watch(ctx, ref(scope, "k"))
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
	// Wait until the listener is back.
	waitUp(t, s)
	ch, stop, err = s.Watch(ctx, ref(scope, "k"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if fired(ch, 50*time.Millisecond) {
		t.Fatal("spurious wake after reconnect")
	}
	if err := s.Complete(ctx, hold(scope, "k", "t"), completion(result(200), t0, t0.Add(time.Hour))); err != nil {
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
	ch, stop, err := s.Watch(ctx, ref(scope, "k"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := s.Complete(ctx, hold(scope, "k", "t"), completion(result(200), t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if fired(ch, 100*time.Millisecond) {
		t.Fatal("fired with notifications off")
	}
	s.Close()
	if _, _, err := s.Watch(ctx, ref(scope, "k")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close = %v", err)
	}
}

// Close stops the listener: its backend disappears.
func TestCloseStopsListener(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	listening(t, s)
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

// Watch returns at once while the listener is down, also on the first
// Watch, and the watch is woken when the listener comes up.
func TestWatchDoesNotWaitForListener(t *testing.T) {
	requirePostgres(t)
	px, s, direct := proxiedStore(t)
	ctx := t.Context()
	scope := claimAt("", "", "", t0, 0).Scope
	px.Set(conformance.ProxyDown)

	watch := func(key string) <-chan struct{} {
		t.Helper()
		start := time.Now()
		ch, stop, err := s.Watch(ctx, ref(scope, key))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Fatalf("Watch with the listener down took %v", d)
		}
		return ch
	}
	first := watch("a") // starts the listener, which cannot connect
	time.Sleep(100 * time.Millisecond)
	second := watch("b")
	if closedNow(first) || closedNow(second) || s.listener.isUp() {
		t.Fatal("woken, or up, with the server unreachable")
	}
	px.Set(conformance.ProxyUp)
	for i, ch := range []<-chan struct{}{first, second} {
		if !fired(ch, 10*time.Second) {
			t.Fatalf("watch %d not woken when the listener came up", i)
		}
	}
	// Notifications flow once it is up.
	waitUp(t, s)
	if res, err := direct.Claim(ctx, claimAt("c", "fp", "t", t0, time.Minute)); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	ch := watch("c")
	if err := direct.Release(ctx, hold(scope, "c", "t")); err != nil {
		t.Fatal(err)
	}
	if !fired(ch, 5*time.Second) {
		t.Fatal("no notification once the listener is up")
	}
}

// countHandler counts the log records at Warn level or above.
type countHandler struct{ warns *atomic.Int32 }

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.warns.Add(1)
	}
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

// The application closes the pool without closing the store: once its
// connection breaks, the listener stops instead of retrying (and warning)
// forever.
func TestListenerStopsWhenPoolClosed(t *testing.T) {
	defer func(b time.Duration) { listenerBackoff = b }(listenerBackoff)
	listenerBackoff = 20 * time.Millisecond
	var warns atomic.Int32
	p := newPool(t)
	s := newStore(t, p, WithLogger(slog.New(countHandler{&warns})))
	ctx := t.Context()
	listening(t, s)
	ch, stop, err := s.Watch(ctx, ref("s", "k"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	p.Close() // the listener's connection was hijacked: it survives this
	c, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var n int
	if err := c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query = $1`, "LISTEN "+quoted(s.channel)).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminated %d listeners (%v), want 1", n, err)
	}
	if !fired(ch, 5*time.Second) {
		t.Fatal("watchers not woken when the listener dropped")
	}
	select {
	case <-s.listener.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("listener still retrying on a closed pool (%d warnings)", warns.Load())
	}
	if w := warns.Load(); w > 1 {
		t.Fatalf("%d warnings, want at most the one for the dropped connection", w)
	}
	// Watch still answers, at once, with a watch that never fires (the
	// engine polls).
	start := time.Now()
	ch, stop2, err := s.Watch(ctx, ref("s", "k"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	if d := time.Since(start); d > 100*time.Millisecond || fired(ch, 50*time.Millisecond) {
		t.Fatalf("Watch after the listener stopped: %v", d)
	}
}

// A completion, release or delete nobody waits for sends no notification
// (so its commit takes no database-wide lock); one whose record a waiter
// marked sends exactly one. A raw LISTEN on the store's channel sees what
// is sent.
func TestNotifyOnlyWhenWaited(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	scope := claimAt("", "", "", t0, 0).Scope
	raw, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(context.Background())
	if _, err := raw.Exec(ctx, "LISTEN "+quoted(s.channel)); err != nil {
		t.Fatal(err)
	}
	received := func() int {
		n := 0
		for {
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, err := raw.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return n
			}
			n++
		}
	}
	marked := func(key string) bool {
		var w bool
		if err := s.db.QueryRow(ctx, `SELECT waiters FROM `+quoted(s.table)+` WHERE scope = $1 AND key = $2`, []byte(scope), key).Scan(&w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	listening(t, s)
	ends := map[string]func(key string) error{
		"complete": func(key string) error {
			return s.Complete(ctx, hold(scope, key, "t"), completion(result(200), t0, t0.Add(time.Hour)))
		},
		"release": func(key string) error { return s.Release(ctx, hold(scope, key, "t")) },
		"delete":  func(key string) error { _, err := s.Delete(ctx, ref(scope, key)); return err },
	}
	for name, end := range ends {
		for _, waited := range []bool{false, true} {
			key := fmt.Sprint(name, waited)
			if res, err := s.Claim(ctx, claimAt(key, "fp", "t", t0, time.Minute)); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			if waited {
				for range 3 { // only the first watch writes the mark
					_, stop, err := s.Watch(ctx, ref(scope, key))
					if err != nil {
						t.Fatal(err)
					}
					defer stop()
				}
			}
			if marked(key) != waited {
				t.Fatalf("%s: marked = %v, want %v", key, !waited, waited)
			}
			if err := end(key); err != nil {
				t.Fatal(err)
			}
			want := map[bool]int{false: 0, true: 1}[waited]
			if got := received(); got != want {
				t.Errorf("%s: %d notifications, want %d", key, got, want)
			}
		}
	}
}

// The engine watches, then looks at the record, then waits. Racing that
// with the completion, over and over, the waiter either sees the
// completed record when it looks or is woken: no wake-up is lost between
// the mark and the completion, whichever commits first.
func TestWatchMarkRace(t *testing.T) {
	p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
	s := newStore(t, p)
	ctx := t.Context()
	scope := claimAt("", "", "", t0, 0).Scope
	listening(t, s)
	var sawDone, woken int
	for i := range 200 {
		key := fmt.Sprint("race", i)
		if res, err := s.Claim(ctx, claimAt(key, "fp", "t", t0, time.Minute)); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		start := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			<-start
			done <- s.Complete(ctx, hold(scope, key, "t"), completion(result(200), t0, t0.Add(time.Hour)))
		}()
		close(start)
		ch, stop, err := s.Watch(ctx, ref(scope, key))
		if err != nil {
			t.Fatal(err)
		}
		rec, ok, err := s.Get(ctx, ref(scope, key), t0)
		if err != nil || !ok {
			t.Fatal(rec, ok, err)
		}
		if rec.State == store.Completed {
			sawDone++
		} else if fired(ch, 5*time.Second) {
			woken++
		} else {
			t.Fatalf("round %d: the record was in progress when looked at, and the waiter was never woken", i)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("200 rounds: completion seen on the look %d times, waiter woken %d times", sawDone, woken)
}
