package sqlbase

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var errTestClosed = errors.New("teststore: store closed")

// logBuffer is a slog destination tests read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newTestBase(interval time.Duration) (*Base, *logBuffer) {
	logs := &logBuffer{}
	o := Options{Table: "keys", SweepInterval: interval, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	return NewBase("teststore", o, errTestClosed), logs
}

// TestSweep: the loop runs its pass every interval, with a context
// bounded by the interval, logs a failing pass and carries on, and ends
// with ctx's error or with the store's ErrClosed.
func TestSweep(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop string // "ctx" or "close"
		want error
	}{
		{"cancelled", "ctx", context.Canceled},
		{"closed", "close", errTestClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, logs := newTestBase(0)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				passes := 0
				done := make(chan error)
				start := time.Now()
				go func() {
					done <- b.Sweep(ctx, time.Minute, func(pctx context.Context) (slog.Attr, error) {
						passes++
						if dl, ok := pctx.Deadline(); !ok || time.Until(dl) != time.Minute {
							t.Errorf("pass context deadline %v (%v)", dl, ok)
						}
						if passes == 2 {
							return slog.Int("deleted", 7), errors.New("disk on fire")
						}
						return slog.Int("deleted", 1), nil
					})
				}()
				time.Sleep(3*time.Minute + time.Second)
				synctest.Wait()
				if passes != 3 {
					t.Errorf("%d passes in %v, want 3", passes, time.Since(start))
				}
				if got := logs.String(); !strings.Contains(got, `msg="teststore: sweep failed" table=keys deleted=7 err="disk on fire"`) ||
					strings.Count(got, "sweep failed") != 1 {
					t.Errorf("logs:\n%s", got)
				}
				if tc.stop == "ctx" {
					cancel()
				} else {
					b.Close(nil)
				}
				if err := <-done; !errors.Is(err, tc.want) {
					t.Errorf("Sweep returned %v, want %v", err, tc.want)
				}
			})
		})
	}
}

func TestSweepBadInterval(t *testing.T) {
	b, _ := newTestBase(0)
	for _, d := range []time.Duration{0, -time.Second} {
		err := b.Sweep(t.Context(), d, func(context.Context) (slog.Attr, error) { return slog.Attr{}, nil })
		if err == nil || !strings.HasPrefix(err.Error(), "teststore: sweep interval") {
			t.Errorf("Sweep(%v) = %v, want an error", d, err)
		}
	}
}

// TestStartSweeper: the background sweeper runs with the configured
// interval until Close, which waits for it; a sweeper that stops with an
// error of its own is logged; no interval, no sweeper.
func TestStartSweeper(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		err      error
		started  bool
		logged   bool
	}{
		{"none", 0, nil, false, false},
		{"closed", time.Minute, errTestClosed, true, false},
		{"failed", time.Minute, errors.New("broken"), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b, logs := newTestBase(tc.interval)
				var got time.Duration
				started := false
				b.StartSweeper(func(ctx context.Context, interval time.Duration) error {
					started, got = true, interval
					if tc.err == errTestClosed {
						<-ctx.Done()
					}
					return tc.err
				})
				synctest.Wait()
				b.Close(nil)
				if started != tc.started || started && got != tc.interval {
					t.Errorf("started %v with %v, want %v with %v", started, got, tc.started, tc.interval)
				}
				if logged := strings.Contains(logs.String(), "teststore: sweeper stopped"); logged != tc.logged {
					t.Errorf("logs:\n%s", logs)
				}
			})
		})
	}
}

// TestClose: Close cancels the context, waits for the background work,
// runs its function once, and Go runs nothing afterwards.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, _ := newTestBase(0)
		stopped := false
		if !b.Go(func(ctx context.Context) { <-ctx.Done(); time.Sleep(time.Second); stopped = true }) {
			t.Fatal("Go before Close ran nothing")
		}
		closes := 0
		b.Close(func() { closes++ })
		b.Close(func() { closes++ })
		if !stopped || closes != 1 {
			t.Errorf("work stopped %v, close function ran %d times; want true, 1", stopped, closes)
		}
		if b.Context().Err() == nil {
			t.Error("Context not cancelled")
		}
		if b.Go(func(context.Context) { t.Error("ran after Close") }) {
			t.Error("Go after Close reported true")
		}
	})
}
