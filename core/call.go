package idem

import (
	"context"
	"fmt"
	"time"
)

// This file is the lifecycle as a transport sees it: Start claims, the
// transport runs the operation, and Finish or Release settles it. Do and
// every transport that is not net/http (the Fiber adapter) are written on
// it; the net/http middleware drives the same flight directly, because it
// must settle a response that starts streaming before its handler returns.

// Call is one operation that Start claimed for its caller. Run the
// operation with the context from Context, then end the call with exactly
// one of Finish, Complete or Release; until then the heartbeat keeps the
// claim. Ending a call twice does nothing. A Call is not safe for
// concurrent use.
type Call struct {
	f     flight
	p     *Policy // Finish's HTTP rules
	open  bool    // the call holds the claim
	ended bool
	run   time.Time // when the operation started
	do    bool      // Do's: keys stay per kind and name whatever WithGlobalKeys says
}

// Start claims op's key for an operation its caller runs, as Do does with
// a function. It returns one of:
//   - a Call, when the operation must run now: the claim is held until
//     the call ends;
//   - the stored response, when the key already completed with the same
//     fingerprint (a retry): send it instead of running the operation.
//     Other replays may share it (the replay cache, duplicates waiting in
//     this process): read it, never change it;
//   - an error, as Do returns them: ErrMissingKey, ErrInvalidKey,
//     ErrNamespaceRequired, ErrMismatch, ErrInFlight and ErrStoreFailure
//     (both as a *RetryError), or ctx's error. Policy.Problem turns them
//     into an HTTP answer.
//
// With WithFailOpen, a store that fails gives a Call that holds nothing:
// the operation runs unprotected, and ending the call only reports it.
//
// Call.Finish stores an HTTP response by the default HTTP rules; an HTTP
// transport with HTTPOptions starts its calls with Policy.Start.
func (e *Engine) Start(ctx context.Context, op Op) (*Call, *Response, error) {
	return e.def.Start(ctx, op)
}

// Start is Engine.Start for an HTTP transport: the call's Finish stores
// the response by p's release rule, body cap and headers.
func (p *Policy) Start(ctx context.Context, op Op) (*Call, *Response, error) {
	c := &Call{p: p}
	resp, err := c.start(p.e, ctx, op)
	if resp != nil || err != nil {
		c.end()
		return nil, resp, err
	}
	return c, nil, nil
}

// start is Start for c. It returns what Start returns but the call;
// when both are nil the call runs (held when c.open; unprotected, with
// WithFailOpen, when not).
func (c *Call) start(e *Engine, ctx context.Context, op Op) (*Response, error) {
	f := &c.f
	f.e, f.ctx, f.start = e, ctx, time.Now()
	f.ev.Method, f.ev.Route, f.ev.key = op.Kind, op.Name, op.Key
	if err := c.admit(op); err != nil {
		return nil, err
	}
	o := f.acquire()
	switch o.verdict {
	case replay:
		return f.replayed(o.rec), nil
	case mismatch:
		return nil, ErrMismatch
	case inFlight:
		return nil, &RetryError{Err: inFlightErr(f.ev.Err), After: f.retryAfter(o.rec)}
	case canceled, unreadable:
		return nil, o.err
	case failed:
		if e.failsOpen(o.err) {
			f.ev.FailedOpen, c.run = true, time.Now()
			return nil, nil
		}
		return nil, &RetryError{Err: fmt.Errorf("%w: %w", ErrStoreFailure, o.err), After: e.retryAfter(0)}
	}
	if err := f.begin(); err != nil {
		switch f.ev.Outcome {
		case OutcomeCanceled:
			return nil, ctx.Err()
		case OutcomeConflict:
			return nil, &RetryError{Err: ErrInFlight, After: e.retryAfter(0)}
		}
		return nil, &RetryError{Err: fmt.Errorf("%w: %w", ErrStoreFailure, err), After: e.retryAfter(0)}
	}
	f.to(running, nil)
	c.open, c.run = true, time.Now()
	return nil, nil
}

// admit checks op's key and namespace and scopes the flight; the error
// says what op lacks.
func (c *Call) admit(op Op) error {
	f, e := &c.f, c.f.e
	var err error
	switch {
	case op.Key == "":
		f.ev.Outcome, err = OutcomeMissingKey, ErrMissingKey
	case checkKey(op.Key) != nil:
		f.ev.Outcome, err = OutcomeInvalidKey, checkKey(op.Key)
	case e.cfg.keyValidator != nil && e.cfg.keyValidator(op.Key) != nil:
		f.ev.Outcome, err = OutcomeInvalidKey, fmt.Errorf("%w: %w", ErrInvalidKey, e.cfg.keyValidator(op.Key))
	case op.Namespace == "" && e.cfg.requireNamespace:
		f.ev.Outcome, err = OutcomeNoNamespace, ErrNamespaceRequired
	}
	if err != nil {
		return err
	}
	f.scope = Scope(op.Namespace, op.Kind, op.Name)
	if e.cfg.globalKeys && !c.do {
		f.scope = Scope(op.Namespace, "", "") // another operation: another fingerprint, ErrMismatch
	}
	f.key, f.rawFP, f.fp, f.token = op.Key, op.Fingerprint, e.keyFingerprint(op.Fingerprint), newToken()
	f.retention = e.cfg.retention
	if op.Retention > 0 {
		f.retention = min(op.Retention, MaxLifetime)
	}
	f.lease = min(e.cfg.lease, f.retention)
	return nil
}

// Context returns ctx for the operation: with the store's exactly-once
// transaction (TxBeginner), when it has one, so that the operation's
// writes commit with its result.
func (c *Call) Context(ctx context.Context) context.Context {
	if !c.open {
		return ctx
	}
	return c.f.runContext(ctx)
}

// Finish ends the call with an HTTP response, as the net/http middleware
// ends a request under the policy that started it: a status from
// MinStatus to MaxStatus that the release rule (WithReleaseRule; by
// default 5xx and 429) keeps is stored,
// with the headers a replay may carry (no Set-Cookie, Date, hop-by-hop
// headers, or replay markers; WithReplayedHeaders applies) and without
// the body past WithMaxResponseBody; any other status releases the key.
// The error, a *RetryError wrapping ErrStoreFailure, means the
// exactly-once transaction failed to commit: the response did not happen,
// and the client should get the error instead.
func (c *Call) Finish(resp Response) error {
	f, h := &c.f, c.p.h
	f.ev.Status = resp.Status
	keep := resp.Status >= MinStatus && resp.Status <= MaxStatus && !h.release(resp.Status)
	if !keep {
		return c.settle(Response{}, false)
	}
	omitted := resp.BodyOmitted || len(resp.Body) > h.maxResponseBody
	stored := Response{Status: resp.Status, Header: storedHeader(resp.Header, nil, h.replayHeader, omitted, h.replayAllow)}
	if omitted {
		stored.BodyOmitted = true
	} else {
		stored.Body = resp.Body
	}
	return c.settle(stored, true)
}

// Complete ends the call by storing resp as it is, whatever the release
// rule says: for transports whose results are not HTTP responses (put
// them in Body, with a Status from MinStatus to MaxStatus). The error is
// Finish's, or, for a Status out of that range, one that says so, after
// the key is released.
func (c *Call) Complete(resp Response) error {
	if resp.kind == kindHTTP && (resp.Status < MinStatus || resp.Status > MaxStatus) {
		c.Release()
		return fmt.Errorf("idem: Call.Complete: status %d is not %d to %d; the key is released", resp.Status, MinStatus, MaxStatus)
	}
	return c.settle(resp, true)
}

// Release ends the call without a result: the key is released (and the
// transaction rolled back), so a retry runs the operation again. Release
// after an operation failed in a way the client should retry, or
// panicked.
func (c *Call) Release() { _ = c.settle(Response{}, false) }

// settle stores resp (keep) or releases the key, and ends the call.
func (c *Call) settle(resp Response, keep bool) error {
	if c.ended {
		return nil
	}
	defer c.end()
	if !c.run.IsZero() {
		c.f.ev.Handler = time.Since(c.run)
	}
	if !c.open {
		return nil
	}
	c.open = false
	var answer *Response
	if keep {
		answer = &resp
	}
	if !c.f.to(settled, answer) {
		return c.f.commitFailed()
	}
	return nil
}

// end reports the call's event, once.
func (c *Call) end() {
	if !c.ended {
		c.ended = true
		c.f.end()
	}
}
