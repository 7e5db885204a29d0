package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/core/store"
)

// This file is the first half of the lifecycle: acquire claims the key,
// or finds what holds it and decides (replay, mismatch, in flight),
// waiting in wait mode.

// verdict is what acquire found.
type verdict uint8

const (
	acquired   verdict = iota + 1 // this flight holds the claim
	replay                        // a completed record for the same request: f.rec
	mismatch                      // the key belongs to another request
	inFlight                      // another flight holds the key: f.rec; retry after retryAfter
	failed                        // the store failed: f.err
	canceled                      // the caller's context ended first: f.err
	unreadable                    // a completed record that does not open (WithEncryption): f.err
)

// outcome of acquire, with what the caller answers from.
type outcome struct {
	verdict verdict
	rec     *record
	err     error
}

// acquire claims the key or finds what holds it, waiting in wait mode.
// It sets the event's outcome for every verdict but acquired.
func (f *flight) acquire() outcome {
	if f.e.bg.completing(f.scope, f.key) {
		// This process ran the key and still holds its result, retrying
		// the completion in the background: never run it again beside it.
		f.ev.Outcome = OutcomeConflict
		return outcome{verdict: inFlight, rec: &record{State: store.InProgress, Fingerprint: f.fp, LeaseEnd: f.now}}
	}
	if o, ok := f.cached(); ok {
		return o
	}
	f.cacheGen = f.e.cache.generation()
	o, ok := f.local()
	if !ok {
		o = f.acquireStore()
	}
	if o.verdict == acquired {
		f.e.local.add(f)
	}
	return o
}

// waitDeadline starts f's wait, unless it has begun, and returns when it
// ends: WithWait's limit counts once, from the first wait, whether f waits
// on a flight of this process, on the store, or on one and then the other.
func (f *flight) waitDeadline() time.Time {
	if f.waitFrom.IsZero() {
		f.waitFrom = time.Now()
	}
	return f.waitFrom.Add(f.e.cfg.wait)
}

// acquireStore is acquire's store part: claim, confirm, or decide from
// the record that holds the key.
func (f *flight) acquireStore() outcome {
	res, err := f.claim()
	if err != nil {
		return f.storeFailure(err)
	}
	if res.Acquired {
		return f.confirm()
	}
	return f.existing(res.Existing, false)
}

// confirm checks a claim whose answer came late: when the Claim call took
// so long that the lease it set may have run out before the answer
// arrived (the process was stopped, the store stalled), another request
// may have taken the key over meanwhile, so the claim is extended, token
// checked, before the work runs.
func (f *flight) confirm() outcome {
	e := f.e
	now := e.clockNow()
	if f.txClaim || now.Before(f.now.Add(f.lease-f.lease/3)) {
		// A claim inside a transaction has no lease to run out: the
		// transaction holds it.
		return outcome{verdict: acquired}
	}
	if e.extender == nil {
		f.release()
		return f.storeFailure(errors.New("idem: the claim's answer came after its lease had nearly run out, and the store cannot extend it"))
	}
	ctx := f.storeCall(false)
	err := e.extender.Extend(ctx, f.hold(), now, now.Add(f.lease))
	e.endCall(ctx, StoreExtend, err, &f.ev.Claim)
	switch {
	case err == nil:
		f.leaseEnd.Store(now.Add(f.lease).UnixNano())
		return outcome{verdict: acquired}
	case errors.Is(err, ErrLeaseLost):
		f.ev.Outcome, f.ev.Err = OutcomeConflict, err
		return outcome{verdict: inFlight, rec: &record{State: store.InProgress, Fingerprint: f.fp, LeaseEnd: now}}
	}
	f.releaseLater()
	return f.storeFailure(err)
}

// claimResult is store.ClaimResult with the existing record decoded.
type claimResult struct {
	Acquired bool
	Existing *record
}

// claim makes one Claim call with a fresh token.
func (f *flight) claim() (claimResult, error) {
	e := f.e
	now, err := e.now(f.ctx)
	if err != nil {
		return claimResult{}, fmt.Errorf("idem: reading the store's clock: %w", err)
	}
	f.now = now
	leaseEnd := f.now.Add(f.lease)
	f.leaseEnd.Store(leaseEnd.UnixNano())
	ctx := f.storeCall(false)
	f.learned = ctx.began
	c := store.Claim{
		Scope: f.scope, Key: f.key, Fingerprint: f.fp, Token: f.token,
		Now: f.now, LeaseEnd: leaseEnd,
	}
	var res store.ClaimResult
	if e.txc != nil {
		var t store.Tx
		res, t, err = e.txc.ClaimTx(ctx, c)
		if err == nil && res.Acquired != (t != nil) {
			if t != nil {
				t.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the error below is the one to report
			}
			err = fmt.Errorf("idem: %T.ClaimTx returned Acquired %t with a transaction %v", e.store, res.Acquired, t)
		}
		if err == nil && t != nil {
			f.tx, f.txClaim = t, true
		}
	} else {
		res, err = e.store.Claim(ctx, c)
	}
	e.endCall(ctx, StoreClaim, err, &f.ev.Claim)
	if err == nil && !res.Acquired && res.Existing == nil {
		err = fmt.Errorf("idem: %T.Claim returned neither a claim nor the existing record", e.store)
	}
	if err != nil {
		// The claim may have landed although its answer did not (a
		// timeout): release it in the background, token-checked.
		f.releaseLater()
		return claimResult{}, err
	}
	if res.Acquired {
		return claimResult{Acquired: true}, nil
	}
	rec, err := fromStore(res.Existing)
	if err != nil {
		return claimResult{}, fmt.Errorf("idem: %T returned a record it cannot have written: %w", e.store, err)
	}
	return claimResult{Existing: rec}, nil
}

// existing decides from a record that blocked the claim. waited marks a
// decision made after waiting.
func (f *flight) existing(rec *record, waited bool) outcome {
	if err := f.e.unknownSeal(rec); err != nil {
		// Sealed under a key this engine lacks: its fingerprint cannot be
		// judged either. Never a replay, never a second run.
		f.ev.Outcome, f.ev.Err = OutcomeUndecryptable, err
		return outcome{verdict: unreadable, err: err}
	}
	switch {
	case !f.sameRequest(rec.Fingerprint):
		f.ev.Outcome = OutcomeFingerprintMismatch
		return outcome{verdict: mismatch, rec: rec}
	case rec.State == store.Completed:
		resp, err := f.e.open(f.scope, f.key, rec.Response)
		if err != nil {
			// Never a replay of what does not open, and never a second run.
			f.ev.Outcome, f.ev.Err = OutcomeUndecryptable, err
			return outcome{verdict: unreadable, err: err}
		}
		if resp != rec.Response {
			opened := *rec
			opened.Response = resp
			rec = &opened
		}
		f.ev.Outcome = OutcomeReplayed
		if waited {
			f.ev.Outcome = OutcomeReplayedAfterWait
		}
		f.e.cache.put(f.scope, f.key, rec, false, f.learned, f.cacheGen) // the store's: the caller may keep it
		return outcome{verdict: replay, rec: rec}
	case f.e.cfg.wait > 0 && !waited:
		return f.wait(rec)
	}
	f.ev.Outcome = OutcomeConflict
	if waited {
		f.ev.Outcome = OutcomeWaitTimeout
	}
	return outcome{verdict: inFlight, rec: rec}
}

// storeFailure reports a store call that failed before the work ran: a
// store failure, or, when the caller's context ended meanwhile (the
// client hung up), a cancellation, which is not the store's fault and
// never runs the work unprotected.
func (f *flight) storeFailure(err error) outcome {
	if cerr := f.ctx.Err(); cerr != nil {
		f.ev.Outcome, f.ev.Err = OutcomeCanceled, fmt.Errorf("%w (the store call ended with: %w)", cerr, err)
		return outcome{verdict: canceled, err: cerr}
	}
	f.ev.Outcome, f.ev.Err = OutcomeStoreFailure, err
	return outcome{verdict: failed, err: err}
}

// retryAfter is the hint a caller gets with an in-flight verdict.
func (f *flight) retryAfter(rec *record) time.Duration {
	return f.e.retryAfter(rec.LeaseEnd.Sub(f.now))
}

// waitCanceled is the outcome of a wait that the caller's context ended.
func (f *flight) waitCanceled() outcome {
	f.ev.Err = f.ctx.Err()
	f.ev.Outcome = OutcomeCanceled
	return outcome{verdict: canceled, err: f.ctx.Err()}
}

// wakeGap is the least time between two looks at the store that a wait
// makes on wakes.
const wakeGap = 25 * time.Millisecond

// wait waits for the claim that holds the key to finish, then claims
// again: a replay, this flight's own claim (the first released), or, when
// the wait limit or the caller's context ends first, in flight. While
// this process retries the key's completion in the background it does not
// claim at all: the claim's lease may run out meanwhile, and taking it
// over would run the work beside the answer already sent.
func (f *flight) wait(rec *record) outcome {
	e := f.e
	end := f.waitDeadline()
	defer func() { f.ev.Waited = time.Since(f.waitFrom) }()
	deadline := time.NewTimer(time.Until(end))
	defer deadline.Stop()
	wctx, cancel := context.WithDeadline(f.ctx, end)
	defer cancel()
	bo := backoff{10 * time.Millisecond, 500 * time.Millisecond}
	// One watch serves until it fires: a store may write to register it
	// (pgxstore marks the record), so a poll that finds nothing keeps it.
	var wake <-chan struct{}
	stop := func() {}
	defer func() { stop() }()
	woke := false          // a wake ended the last round
	var lastLook time.Time // when the last claim began
	for {
		if wake == nil && e.notifier != nil {
			if ch, s, err := e.notifier.Watch(wctx, store.Ref{Scope: f.scope, Key: f.key}); err == nil {
				wake, stop = ch, s
			}
		}
		if woke {
			// A wake right after a look (a busy channel, a store whose
			// watch fires early) waits out wakeGap from that look, so a
			// restless watch cannot make this loop claim as fast as the
			// store answers; a real completion is seen at most wakeGap
			// late.
			woke = false
			if d := wakeGap - time.Since(lastLook); d > 0 {
				gap := time.NewTimer(d)
				select {
				case <-gap.C:
				case <-deadline.C:
					gap.Stop()
					return f.existing(rec, true)
				case <-f.ctx.Done():
					gap.Stop()
					return f.waitCanceled()
				}
			}
		}
		if !e.bg.completing(f.scope, f.key) {
			// Look again now that the watch is in place, so a completion
			// that happened before it is not missed.
			lastLook = time.Now()
			res, err := f.claim()
			switch {
			case err != nil && f.ctx.Err() != nil:
				return f.storeFailure(err) // canceled
			case err != nil:
				// The key is known to be in flight: never run unprotected
				// beside it, even with fail open.
				f.ev.Err = err
				f.ev.Outcome = OutcomeWaitTimeout
				return outcome{verdict: inFlight, rec: rec}
			case res.Acquired:
				return f.confirm()
			}
			rec = res.Existing
			if rec.State != store.InProgress || !f.sameRequest(rec.Fingerprint) {
				return f.existing(rec, true)
			}
		}
		poll := time.NewTimer(bo.d)
		select {
		case <-wake:
			stop()
			wake, stop, woke = nil, func() {}, true
		case <-poll.C:
			bo.grow()
		case <-deadline.C:
			poll.Stop()
			return f.existing(rec, true)
		case <-f.ctx.Done():
			poll.Stop()
			return f.waitCanceled()
		}
		poll.Stop()
	}
}
