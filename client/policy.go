package idemclient

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy is the Transport's retry rule on its own: how many attempts
// one logical call may make, within what budget, and how long to wait
// between them. Transports of other protocols use it to retry as the
// Transport does (the gRPC client interceptor, idemgrpc, does). Make one
// with NewRetryPolicy; it is safe for concurrent use.
type RetryPolicy struct {
	maxAttempts   int
	budget        time.Duration
	backoffBase   time.Duration
	backoffCap    time.Duration
	retryAfterCap time.Duration
	jitter        func(time.Duration) time.Duration // fullJitter; replaced in tests
}

func defaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		maxAttempts:   DefaultMaxAttempts,
		budget:        DefaultBudget,
		backoffBase:   DefaultBackoffBase,
		backoffCap:    DefaultBackoffCap,
		retryAfterCap: DefaultRetryAfterCap,
		jitter:        fullJitter,
	}
}

// NewRetryPolicy returns the retry policy that WithMaxAttempts,
// WithBudget, WithBackoff and WithRetryAfterCap set, with the Transport's
// defaults for those not given. Any other option is an error wrapping
// ErrBadOption: it has no meaning outside HTTP.
func NewRetryPolicy(opts ...Option) (*RetryPolicy, error) {
	c := config{retry: defaultRetryPolicy(), retryOnly: true}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	return &c.retry, nil
}

// Begin starts the attempts of one logical call, which ctx bounds; the
// budget runs from now.
func (p *RetryPolicy) Begin(ctx context.Context) *Retries {
	return &Retries{p: p, ctx: ctx, start: time.Now()}
}

// Retries is the state of one logical call under a RetryPolicy. It is not
// safe for concurrent use.
type Retries struct {
	p     *RetryPolicy
	ctx   context.Context
	start time.Time
	spent int // attempts that count toward the limit: all but in-progress ones
	busy  int // attempts answered in progress
}

// Next is called after each attempt, with whether its answer may be
// retried, whether it says the key is in progress (such attempts do not
// count toward the attempt limit: the budget bounds them), and the wait
// the answer asks for (Retry-After, RetryInfo; negative for none). It
// returns the wait before the next attempt and whether that attempt may
// be made: ok is false when the answer may not be retried, or the attempt
// limit, the budget or ctx's deadline would be passed. The wait is the
// asked-for one up to the cap (WithRetryAfterCap); without one, the
// backoff (WithBackoff), which grows with the attempts that count. An
// in-progress answer waits at least the backoff base, whatever it asks
// for; without a wait asked for, it backs off on its own count, so that
// waiting out a running request neither hammers the server nor makes the
// backoff of a later failure longer.
func (r *Retries) Next(retryable, inProgress bool, hint time.Duration) (wait time.Duration, ok bool) {
	if inProgress {
		r.busy++
	} else {
		r.spent++
	}
	if !retryable {
		return 0, false
	}
	p := r.p
	switch {
	case inProgress && hint < 0:
		wait = max(p.backoff(r.busy), p.backoffBase)
	case inProgress:
		wait = max(min(hint, p.retryAfterCap), p.backoffBase)
	case hint < 0:
		wait = p.backoff(r.spent)
	default:
		wait = min(hint, p.retryAfterCap)
	}
	if r.spent >= p.maxAttempts || r.ctx.Err() != nil {
		return wait, false
	}
	at := time.Now().Add(wait)
	if at.Sub(r.start) > p.budget {
		return wait, false
	}
	if dl, ok := r.ctx.Deadline(); ok && !at.Before(dl) {
		return wait, false
	}
	return wait, true
}

// Wait waits d, or until the call's context ends, and returns the
// context's error in the second case.
func (r *Retries) Wait(d time.Duration) error {
	if d <= 0 {
		return r.ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-r.ctx.Done():
		return r.ctx.Err()
	case <-tm.C:
		return nil
	}
}

// backoff returns the wait after the n-th answer (n from 1) of one kind,
// failures or in-progress answers, when it asks for none: full jitter over
// base·2^(n-1), capped.
func (p *RetryPolicy) backoff(n int) time.Duration {
	d := p.backoffBase
	for i := 1; i < n && d < p.backoffCap; i++ {
		if d > p.backoffCap/2 {
			d = p.backoffCap // doubling would pass the cap, or overflow
			break
		}
		d *= 2
	}
	return p.jitter(min(d, p.backoffCap))
}

// fullJitter returns a uniformly random duration in [0, d], or in [0, d)
// for the largest Duration, where d+1 would overflow.
func fullJitter(d time.Duration) time.Duration {
	if d == math.MaxInt64 {
		return rand.N(d)
	}
	return rand.N(d + 1)
}
