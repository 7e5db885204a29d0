package idemclient

import (
	"context"
	"errors"
	"math"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

func TestNewRetryPolicy(t *testing.T) {
	for name, o := range map[string]Option{
		"WithMethods":         WithMethods("POST"),
		"WithKeyHeader":       WithKeyHeader("X-Key"),
		"WithReplayHeader":    WithReplayHeader("X-Replayed"),
		"WithKeyFunc":         WithKeyFunc(func(*http.Request) string { return "" }),
		"WithMaxBufferedBody": WithMaxBufferedBody(1),
		"WithInProgress":      WithInProgress(InProgress),
		"WithOnAttempt":       WithOnAttempt(func(Attempt) {}),
		"a bad retry option":  WithMaxAttempts(0),
	} {
		if _, err := NewRetryPolicy(o); !errors.Is(err, ErrBadOption) {
			t.Errorf("%s: %v, want ErrBadOption", name, err)
		}
	}
	p, err := NewRetryPolicy(nil, WithMaxAttempts(2), WithBudget(time.Minute), WithBackoff(time.Second, 2*time.Second), WithRetryAfterCap(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := RetryPolicy{maxAttempts: 2, budget: time.Minute, backoffBase: time.Second, backoffCap: 2 * time.Second, retryAfterCap: 3 * time.Second}
	if p.jitter == nil || p.maxAttempts != want.maxAttempts || p.budget != want.budget || p.backoffBase != want.backoffBase ||
		p.backoffCap != want.backoffCap || p.retryAfterCap != want.retryAfterCap {
		t.Errorf("policy %+v, want %+v", *p, want)
	}
	if d, err := NewRetryPolicy(); err != nil || d.maxAttempts != DefaultMaxAttempts || d.budget != DefaultBudget {
		t.Errorf("default policy %+v %v", d, err)
	}
}

// TestRetriesNext runs one logical call's decisions; the jitter always
// waits the longest backoff, or 0 where the case says, so waits are exact.
func TestRetriesNext(t *testing.T) {
	type step struct {
		retryable, inProgress bool
		hint                  time.Duration
		wait                  time.Duration
		ok                    bool
	}
	for _, tc := range []struct {
		name  string
		opts  []Option
		dl    time.Duration // the context's deadline, 0 for none
		low   bool          // the jitter always waits 0, its low end, instead of the longest backoff
		steps []step
	}{
		{"backoff doubles to its cap, then the limit", []Option{WithMaxAttempts(4), WithBackoff(time.Second, 3*time.Second)}, 0, false, []step{
			{true, false, -1, time.Second, true},
			{true, false, -1, 2 * time.Second, true},
			{true, false, -1, 3 * time.Second, true},
			{true, false, -1, 3 * time.Second, false},
		}},
		{"not retryable", nil, 0, false, []step{{false, false, time.Second, 0, false}}},
		{"a hint up to its cap", []Option{WithRetryAfterCap(2 * time.Second)}, 0, false, []step{
			{true, false, time.Second, time.Second, true},
			{true, false, time.Hour, 2 * time.Second, true},
			{true, false, 0, 0, true},
		}},
		{"in progress: the backoff base at least, not counted", []Option{WithMaxAttempts(1)}, 0, false, []step{
			{true, true, 0, DefaultBackoffBase, true},
			{true, true, time.Second, time.Second, true},
			{true, false, 0, 0, false},
		}},
		{"in progress without a hint: the backoff base at least, whatever the jitter", nil, 0, true, []step{
			{true, true, -1, DefaultBackoffBase, true},
			{true, true, -1, DefaultBackoffBase, true},
			{true, true, -2 * time.Second, DefaultBackoffBase, true},
		}},
		{"in progress without a hint: a backoff of its own", []Option{WithBackoff(time.Second, 8*time.Second)}, 0, false, []step{
			{true, true, -1, time.Second, true},
			{true, true, -1, 2 * time.Second, true},
			{true, true, -1, 4 * time.Second, true},
			{true, false, -1, time.Second, true},
			{true, true, -1, 8 * time.Second, true},
		}},
		{"a failure's backoff counts failures only", []Option{WithBackoff(time.Second, 8*time.Second)}, 0, false, []step{
			{true, false, -1, time.Second, true},
			{true, true, 0, time.Second, true},
			{true, true, 0, time.Second, true},
			{true, true, 0, time.Second, true},
			{true, false, -1, 2 * time.Second, true},
		}},
		{"the budget", []Option{WithBudget(5 * time.Second)}, 0, false, []step{
			{true, false, 5 * time.Second, 5 * time.Second, true},
			{true, false, 6 * time.Second, 6 * time.Second, false},
		}},
		{"the deadline", nil, 3 * time.Second, false, []step{
			{true, false, 2 * time.Second, 2 * time.Second, true},
			{true, false, 3 * time.Second, 3 * time.Second, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, err := NewRetryPolicy(tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				p.jitter = func(d time.Duration) time.Duration { return d }
				if tc.low {
					p.jitter = func(time.Duration) time.Duration { return 0 }
				}
				ctx := t.Context()
				if tc.dl > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.dl)
					defer cancel()
				}
				r := p.Begin(ctx)
				for i, s := range tc.steps {
					wait, ok := r.Next(s.retryable, s.inProgress, s.hint)
					if wait != s.wait || ok != s.ok {
						t.Fatalf("step %d: Next = %v, %v; want %v, %v", i+1, wait, ok, s.wait, s.ok)
					}
				}
			})
		})
	}
}

func TestRetriesWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := NewRetryPolicy()
		ctx, cancel := context.WithCancel(t.Context())
		r := p.Begin(ctx)
		start := time.Now()
		if err := r.Wait(time.Second); err != nil || time.Since(start) != time.Second {
			t.Errorf("Wait(1s) = %v after %v", err, time.Since(start))
		}
		cancel()
		if err := r.Wait(time.Second); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait after cancel = %v, want context.Canceled", err)
		}
		if err := r.Wait(0); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait(0) after cancel = %v, want context.Canceled", err)
		}
	})
}

// TestBackoffHugeCap runs the backoff far past where base·2^(n-1) leaves
// int64, under caps up to math.MaxInt64 ("no cap"): each wait must be the
// doubled base up to the cap (jitter at its high end), never negative,
// and full jitter must stay within [0, the cap] without panicking.
func TestBackoffHugeCap(t *testing.T) {
	for _, tc := range []struct {
		name      string
		base, cap time.Duration
	}{
		{"no cap", time.Second, math.MaxInt64},
		{"a cap just past a doubling", time.Second, 1<<62 + 1},
		{"the base at the cap", math.MaxInt64, math.MaxInt64},
		{"an odd base under no cap", 3 * time.Nanosecond, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewRetryPolicy(WithBackoff(tc.base, tc.cap))
			if err != nil {
				t.Fatal(err)
			}
			for n := 1; n <= 100; n++ {
				want := tc.cap
				if n-1 < 63 && tc.base <= tc.cap>>(n-1) {
					want = min(tc.base<<(n-1), tc.cap)
				}
				p.jitter = func(d time.Duration) time.Duration { return d }
				if d := p.backoff(n); d != want {
					t.Fatalf("backoff(%d) = %v, want %v", n, d, want)
				}
				p.jitter = fullJitter
				if d := p.backoff(n); d < 0 || d > tc.cap {
					t.Fatalf("jittered backoff(%d) = %v, want within [0, %v]", n, d, tc.cap)
				}
			}
		})
	}
}

// TestNextHugeLimits makes many retries under limits of math.MaxInt64: the
// waits must stay within [0, the cap].
func TestNextHugeLimits(t *testing.T) {
	p, err := NewRetryPolicy(WithMaxAttempts(math.MaxInt), WithBudget(math.MaxInt64), WithBackoff(time.Second, math.MaxInt64), WithRetryAfterCap(math.MaxInt64))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Begin(t.Context())
	for i := range 200 {
		inProgress := i%2 == 1
		for _, hint := range []time.Duration{-1, math.MaxInt64} {
			if wait, _ := r.Next(true, inProgress, hint); wait < 0 {
				t.Fatalf("retry %d (in progress %v, hint %v): wait %v", i+1, inProgress, hint, wait)
			}
		}
	}
}
