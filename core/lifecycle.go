package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// This file is the claim → run → settle lifecycle, written once and used
// by every transport: the HTTP middleware (serve.go) and Do (do.go). It
// knows nothing of HTTP.

// flight is one call through the lifecycle.
type flight struct {
	e   *Engine
	ctx context.Context // the caller's: its values reach the store, its end cancels claims and waits

	scope, key, fp, token string
	retention, lease      time.Duration
	now                   time.Time    // the engine's clock at the last claim
	leaseEnd              atomic.Int64 // the claim's lease end as last set (claim, heartbeat), Unix ns on the engine's clock
	lost                  atomic.Bool  // a beat found the claim lost

	lf        *localFlight // this flight's hold on its key in the process, until it settles
	tx        Tx           // the exactly-once transaction, while it is open
	completed bool         // Complete (not a transaction) stored the record
	pending   *task

	beat beatState // the heartbeat's links and schedule (heartbeat.go)

	// ctxs are the contexts of the flight's first store calls (a claim and
	// a completion), kept here to save an allocation each.
	ctxs [2]storeCtx
	nctx int

	start time.Time
	ev    Event
}

// storeCall is Engine.storeCall for this flight's own calls, made on the
// caller's goroutine.
func (f *flight) storeCall(detached bool) *storeCtx {
	if f.nctx == len(f.ctxs) {
		return f.e.storeCall(f.ctx, detached)
	}
	c := &f.ctxs[f.nctx]
	f.nctx++
	c.init(f.ctx, f.e.cfg.storeTimeout, detached)
	return c
}

// verdict is what acquire found.
type verdict uint8

const (
	acquired verdict = iota + 1 // this flight holds the claim
	replay                      // a completed record for the same request: f.rec
	mismatch                    // the key belongs to another request
	inFlight                    // another flight holds the key: f.rec; retry after retryAfter
	failed                      // the store failed: f.err
	canceled                    // the caller's context ended first: f.err
)

// outcome of acquire, with what the caller answers from.
type outcome struct {
	verdict verdict
	rec     *Record
	err     error
}

// acquire claims the key or finds what holds it, waiting in wait mode.
// It sets the event's outcome for every verdict but acquired.
func (f *flight) acquire() outcome {
	if f.e.bg.completing(f.scope, f.key) {
		// This process ran the key and still holds its result, retrying
		// the completion in the background: never run it again beside it.
		f.ev.Outcome = OutcomeConflict
		return outcome{verdict: inFlight, rec: &Record{State: StateInProgress, Fingerprint: f.fp, LeaseEnd: f.now}}
	}
	if o, ok := f.cached(); ok {
		return o
	}
	if o, ok := f.local(); ok {
		return o
	}
	o := f.acquireStore()
	if o.verdict == acquired {
		f.e.local.add(f)
	}
	return o
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
	if now.Before(f.now.Add(f.lease - f.lease/3)) {
		return outcome{verdict: acquired}
	}
	if e.extender == nil {
		f.release()
		return f.storeFailure(errors.New("idem: the claim's answer came after its lease had nearly run out, and the store cannot extend it"))
	}
	ctx := f.storeCall(false)
	err := e.extender.Extend(ctx, f.scope, f.key, f.token, now, now.Add(f.lease))
	e.endCall(ctx, StoreExtend, err, &f.ev.Claim)
	switch {
	case err == nil:
		f.leaseEnd.Store(now.Add(f.lease).UnixNano())
		return outcome{verdict: acquired}
	case errors.Is(err, ErrLeaseLost):
		f.ev.Outcome, f.ev.Err = OutcomeConflict, err
		return outcome{verdict: inFlight, rec: &Record{State: StateInProgress, Fingerprint: f.fp, LeaseEnd: now}}
	}
	f.releaseLater()
	return f.storeFailure(err)
}

// claim makes one Claim call with a fresh token.
func (f *flight) claim() (ClaimResult, error) {
	e := f.e
	now, err := e.now(f.ctx)
	if err != nil {
		return ClaimResult{}, fmt.Errorf("idem: reading the store's clock: %w", err)
	}
	f.now = now
	leaseEnd := f.now.Add(f.lease)
	f.leaseEnd.Store(leaseEnd.UnixNano())
	ctx := f.storeCall(false)
	res, err := e.store.Claim(ctx, Claim{
		Scope: f.scope, Key: f.key, Fingerprint: f.fp, Token: f.token,
		Now: f.now, LeaseEnd: leaseEnd,
	})
	e.endCall(ctx, StoreClaim, err, &f.ev.Claim)
	if err == nil && !res.Acquired && res.Existing == nil {
		err = fmt.Errorf("idem: %T.Claim returned neither a claim nor the existing record", e.store)
	}
	if err != nil {
		// The claim may have landed although its answer did not (a
		// timeout): release it in the background, token-checked.
		f.releaseLater()
	}
	return res, err
}

// existing decides from a record that blocked the claim. waited marks a
// decision made after waiting.
func (f *flight) existing(rec *Record, waited bool) outcome {
	switch {
	case rec.Fingerprint != f.fp:
		f.ev.Outcome = OutcomeFingerprintMismatch
		return outcome{verdict: mismatch, rec: rec}
	case rec.State == StateCompleted:
		if err := rec.Check(); err != nil {
			return f.storeFailure(fmt.Errorf("idem: %T returned a record it cannot have written: %w", f.e.store, err))
		}
		f.ev.Outcome = OutcomeReplayed
		if waited {
			f.ev.Outcome = OutcomeReplayedAfterWait
		}
		f.e.cache.put(f.scope, f.key, rec, false) // the store's: the caller may keep it
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
func (f *flight) retryAfter(rec *Record) time.Duration {
	return f.e.retryAfter(rec.LeaseEnd.Sub(f.now))
}

// wait waits for the claim that holds the key to finish, then claims
// again: a replay, this flight's own claim (the first released), or, when
// the wait limit or the caller's context ends first, in flight.
func (f *flight) wait(rec *Record) outcome {
	e := f.e
	wstart := time.Now()
	defer func() { f.ev.Waited = time.Since(wstart) }()
	deadline := time.NewTimer(e.cfg.wait)
	defer deadline.Stop()
	wctx, cancel := context.WithTimeout(f.ctx, e.cfg.wait)
	defer cancel()
	backoff := 10 * time.Millisecond
	// One watch serves until it fires: a store may write to register it
	// (pgxstore marks the record), so a poll that finds nothing keeps it.
	var wake <-chan struct{}
	stop := func() {}
	defer func() { stop() }()
	for {
		if wake == nil && e.notifier != nil {
			if ch, s, err := e.notifier.Watch(wctx, f.scope, f.key); err == nil {
				wake, stop = ch, s
			}
		}
		// Look again now that the watch is in place, so a completion that
		// happened before it is not missed.
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
			return outcome{verdict: acquired}
		}
		rec = res.Existing
		if rec.State != StateInProgress || rec.Fingerprint != f.fp {
			return f.existing(rec, true)
		}
		poll := time.NewTimer(backoff)
		select {
		case <-wake:
			stop()
			wake, stop = nil, func() {}
		case <-poll.C:
			backoff = min(backoff*2, 500*time.Millisecond)
		case <-deadline.C:
			poll.Stop()
			return f.existing(rec, true)
		case <-f.ctx.Done():
			poll.Stop()
			f.ev.Err = f.ctx.Err()
			f.ev.Outcome = OutcomeCanceled
			return outcome{verdict: canceled, err: f.ctx.Err()}
		}
		poll.Stop()
	}
}

// begin starts the run of an acquired flight: the exactly-once
// transaction, when the store has one, and the heartbeat. On an error the
// claim is released and the flight reports a store failure.
func (f *flight) begin() error {
	e := f.e
	if e.txb != nil {
		ctx := f.storeCall(false)
		t, err := e.txb.BeginTx(ctx, f.scope, f.key, f.token)
		e.endCall(ctx, StoreBeginTx, err, nil)
		switch {
		case errors.Is(err, ErrLeaseLost):
			// Another request took the key between the claim and the
			// transaction: it is in flight, and nothing runs beside it.
			f.ev.Outcome, f.ev.Err = OutcomeConflict, err
			return err
		case err != nil:
			f.release()
			f.storeFailure(err)
			return err
		}
		f.tx = t
		if h, ok := t.(ClaimHolder); ok && h.HoldsClaim() {
			return nil // the transaction keeps the claim: no heartbeat
		}
	}
	e.beats.add(f)
	return nil
}

// runContext returns ctx for the work a flight protects: with the
// transaction, when there is one.
func (f *flight) runContext(ctx context.Context) context.Context {
	if f.tx != nil {
		return f.tx.Context(ctx)
	}
	return ctx
}

// settle ends a run with its answer: resp is stored (completed, or
// committed with the transaction) unless keep is false, when the key is
// released. It returns false when a failed commit lost the answer: the
// caller reports a failure instead of resp.
func (f *flight) settle(resp Response, keep bool) bool {
	// The heartbeat keeps the claim alive until the record is stored or
	// released: a store that stalls through the completion must not see
	// the lease run out meanwhile.
	defer f.e.beats.remove(f)
	// With a transaction, Commit's own token check decides a lost claim.
	switch {
	case !keep:
		f.ev.Outcome = OutcomeReleased
		f.rollback()
		f.release()
		f.e.local.finish(f, nil)
		return true
	case f.lost.Load() && f.tx == nil:
		f.ev.Outcome, f.ev.Err = OutcomeExecuted, ErrLeaseLost
		f.e.local.finish(f, nil)
		return true
	}
	f.ev.Outcome = OutcomeExecuted
	stored := f.store(resp)
	if !stored || f.ev.Err != nil || !f.completed && (f.tx != nil || f.e.txb == nil) {
		f.e.local.finish(f, nil) // not stored here: duplicates ask the store
		return stored
	}
	if f.e.cache != nil {
		f.e.cache.put(f.scope, f.key, f.record(resp), true)
	}
	f.e.local.finish(f, &resp)
	return stored
}

// record is the completed record f stored with resp, for the replay cache
// and the duplicates waiting on f.
func (f *flight) record(resp Response) *Record {
	return &Record{Fingerprint: f.fp, State: StateCompleted, Response: &resp, CreatedAt: f.now, ExpiresAt: f.e.clockNow().Add(f.retention)}
}

// store completes the record with resp, or commits it with the
// transaction. A failed commit rolls back and releases the key, and store
// returns false; a Complete that fails for another reason than a lost
// claim is retried in the background.
func (f *flight) store(resp Response) bool {
	e := f.e
	now := e.clockNow()
	expires := now.Add(f.retention)
	var err error
	if f.tx != nil {
		ctx := f.storeCall(true)
		err = f.tx.Commit(ctx, resp, now, expires)
		e.endCall(ctx, StoreCommit, err, &f.ev.Finish)
		if err != nil {
			// The transaction is gone: nothing to retry.
			f.ev.Outcome, f.ev.Err = OutcomeReleased, err
			f.rollback()
			f.release()
			return false
		}
		f.tx = nil // committed: nothing left to roll back
		return true
	}
	ctx := f.storeCall(true)
	err = e.store.Complete(ctx, f.scope, f.key, f.token, resp, now, expires)
	e.endCall(ctx, StoreComplete, err, &f.ev.Finish)
	switch {
	case err == nil:
		f.completed = true
	case errors.Is(err, ErrLeaseLost):
		f.ev.Err = err
	default:
		f.ev.Err = err
		if e.cfg.completionRetry > 0 {
			// The store blipped: the answer goes out, and the record lands
			// in the background while the claim is kept.
			resp.Body = bytes.Clone(resp.Body)
			f.pending = f.task(taskComplete, resp)
		}
	}
	return true
}

// launch hands a pending background completion over, once the answer can
// no longer be taken back (a panicking stream's must not land).
func (f *flight) launch() {
	if f.pending != nil {
		f.e.bg.add(f.pending)
		f.pending = nil
	}
}

// abort ends a run that has no answer to store (a panic, a hijacked
// connection, an answer written elsewhere): the transaction rolls back and
// the key is released.
func (f *flight) abort() {
	f.e.beats.remove(f)
	defer f.e.local.finish(f, nil)
	f.ev.Outcome = OutcomeReleased
	f.rollback()
	f.pending = nil
	f.release()
}

// evict deletes the record this flight completed, when the answer it
// holds turned out truncated (a stream whose handler panicked). The delete
// is token-checked: if the record expired and a retry claimed the key
// meanwhile, that claim stays.
func (f *flight) evict() {
	e := f.e
	ev, ok := e.store.(Evicter)
	if !ok {
		f.ev.Err = fmt.Errorf("idem: a streamed response's handler panicked after its record was completed, and %T cannot evict it (idem.Evicter): retries replay its status and headers", e.store)
		return
	}
	ctx := f.storeCall(true)
	err := ev.Evict(ctx, f.scope, f.key, f.token)
	e.endCall(ctx, StoreEvict, err, &f.ev.Finish)
	if err != nil {
		f.ev.Err = err
	}
}

// release deletes this flight's claim; a failure other than a lost claim
// is retried in the background within the lease.
func (f *flight) release() {
	e := f.e
	ctx := f.storeCall(true)
	err := e.store.Release(ctx, f.scope, f.key, f.token)
	e.endCall(ctx, StoreRelease, err, &f.ev.Finish)
	if err != nil && f.ev.Err == nil {
		f.ev.Err = err
	}
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		f.releaseLater()
	}
}

// releaseLater releases the claim in the background.
func (f *flight) releaseLater() { f.e.bg.add(f.task(taskRelease, Response{})) }

func (f *flight) rollback() {
	if f.tx == nil {
		return
	}
	e := f.e
	ctx := f.storeCall(true)
	err := f.tx.Rollback(ctx)
	e.endCall(ctx, StoreRollback, err, nil)
	f.tx = nil
	if err != nil && f.ev.Err == nil {
		f.ev.Err = err
	}
}

// task returns a background task for this flight's claim.
func (f *flight) task(kind taskKind, resp Response) *task {
	return &task{
		kind: kind, scope: f.scope, key: f.key, token: f.token, fingerprint: f.fp,
		resp: resp, retention: f.retention, lease: f.lease, leaseEnd: time.Unix(0, f.leaseEnd.Load()),
		ev: f.ev, ctx: context.WithoutCancel(f.ctx),
	}
}

// end reports the flight's event: the one place a call's event is sent.
func (f *flight) end() {
	f.e.local.finish(f, nil) // a path that did not settle: duplicates ask the store
	f.ev.Total = time.Since(f.start)
	f.e.cfg.observer(f.ctx, f.ev)
	f.launch()
	f.e.local.release(f)
}

// retryAfter returns the hint for a retry: the engine's, but no more than
// left when left is positive.
func (e *Engine) retryAfter(left time.Duration) time.Duration {
	d := e.cfg.retryAfter
	if left > 0 {
		d = min(d, left)
	}
	return d
}

// seconds returns d in whole seconds rounded up, at least 1, as
// Retry-After carries it.
func seconds(d time.Duration) int {
	return max(int((d+time.Second-1)/time.Second), 1)
}
