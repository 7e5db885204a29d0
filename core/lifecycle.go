package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/core/store"
)

// This file is the claim → run → settle lifecycle, written once and used
// by every transport: the HTTP middleware (serve.go), Start and Do
// (call.go, do.go). It knows nothing of HTTP. acquire.go decides whether
// a flight runs; from there on a flight is the state machine below.

// state is where a flight is once it holds its claim. The moves:
//
//	claimed → running                 begin: the transaction, the heartbeat
//	running → settled                 the answer is stored, or the key released
//	running → streaming               HTTP: the answer starts going out before the
//	                                  work ends: stored without its body, or released
//	running → discarding              HTTP: as streaming, but the commit failed: the
//	                                  client got 503, and the rest is thrown away
//	running → abandoning              HTTP: the handler gave its answer away (Abandon)
//	running, abandoning → hijacked    HTTP: the connection was taken: released
//	any → aborted                     the work panicked, or left no answer: released,
//	                                  or, for a stream whose record was stored, evicted
//
// Every move goes through to, which does what it means in the store.
type state uint8

const (
	claimed state = iota
	running
	abandoning
	streaming
	discarding
	hijacked
	settled
	aborted
)

// to moves f to next, doing in the store what the move means. For the
// moves that settle (to settled or streaming), resp is the answer to
// store, or nil to release the key; to returns false when a failed commit
// lost the answer, and f is then discarding (streaming) or aborted.
func (f *flight) to(next state, resp *Response) bool {
	from := f.st
	f.st = next
	switch next {
	case running:
		return true // begin did the work
	case settled, streaming:
		if from == streaming {
			return true // settled when it started
		}
		var ok bool
		if resp == nil {
			ok = f.settle(Response{}, false)
		} else {
			ok = f.settle(*resp, true)
		}
		if !ok {
			f.st = aborted
			if next == streaming {
				f.st = discarding
			}
		}
		return ok
	case hijacked:
		f.abort()
	case aborted:
		switch from {
		case claimed, running, abandoning:
			f.abort()
		case streaming:
			if f.pending != nil || f.completed {
				// The record (not a transaction's, whose writes did
				// commit) holds an answer the client saw truncated, or,
				// when its Complete failed, may hold it all the same:
				// the background completion must not land, and the
				// record goes, in either state, token-checked.
				f.e.beats.remove(f)
				f.pending = nil
				f.e.local.finish(f, nil)
				f.evict()
			}
			// Neither the duplicates waiting here nor the replay
			// cache may replay it.
			if f.lf != nil {
				f.lf.rec = nil
			}
			f.e.cache.drop(f.scope, f.key)
		}
		f.rollback()
		f.ev.Outcome = OutcomeReleased
	}
	return true
}

// flight is one call through the lifecycle. Its state moves only through
// to (on the caller's goroutine); the heartbeat reads only leaseEnd and
// lost.
type flight struct {
	st  state
	e   *Engine
	ctx context.Context // the caller's: its values reach the store, its end cancels claims and waits

	scope, key, fp, token string
	rawFP                 string // fp before WithEncryption keyed it
	retention, lease      time.Duration
	now                   time.Time    // the engine's clock at the last claim
	leaseEnd              atomic.Int64 // the claim's lease end as last set (claim, heartbeat), Unix ns on the engine's clock
	lost                  atomic.Bool  // a beat found the claim lost

	lf        *localFlight // this flight's hold on its key in the process (&held), until it settles
	held      localFlight  // lf's storage, saving an allocation; waiters may keep it past the flight
	tx        store.Tx     // the exactly-once transaction, while it is open
	txClaim   bool         // the claim lives in tx (store.TxClaimer): its end ends the claim
	completed bool         // Complete (not a transaction) stored the record
	pending   *task

	beat beatState // the heartbeat's links and schedule (heartbeat.go)

	// ctxs are the contexts of the flight's first store calls (a claim and
	// a completion), kept here to save an allocation each.
	ctxs [2]storeCtx
	nctx int

	start    time.Time
	waitFrom time.Time // when the flight began to wait (wait mode), or zero
	expires  time.Time // the stored record's expiry (engine clock), once stored

	// For the replay cache: its generation when the flight began, and
	// when the store call whose record it may keep began (wall clock).
	cacheGen uint64
	learned  time.Time
	ev       Event
}

// hold names this flight's claim to the store.
func (f *flight) hold() store.Hold {
	return store.Hold{Ref: store.Ref{Scope: f.scope, Key: f.key}, Token: f.token}
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

// begin starts the run of an acquired flight: the exactly-once
// transaction, when the store has one, and the heartbeat. On an error the
// claim is released and the flight reports a store failure.
func (f *flight) begin() error {
	e := f.e
	if f.txClaim {
		return nil // claimed inside the transaction, which holds the claim
	}
	if e.txb != nil {
		ctx := f.storeCall(false)
		t, err := e.txb.BeginTx(ctx, f.hold())
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
		if h, ok := t.(store.ClaimHolder); ok && h.HoldsClaim() {
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
	// the lease run out meanwhile. A completion left to the background
	// keeps it beating until launch hands it over, which waits for the
	// answer to be sent (a stream, a slow client).
	defer func() {
		if f.pending == nil {
			f.e.beats.remove(f)
		}
	}()
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
	resp = f.redacted(resp)
	stored := f.store(resp)
	if !stored || f.ev.Err != nil || !f.completed && (f.tx != nil || f.e.txb == nil) {
		f.e.local.finish(f, nil) // not stored here: duplicates ask the store
		return stored
	}
	if f.e.cache != nil {
		f.e.cache.put(f.scope, f.key, f.record(resp), true, f.learned, f.cacheGen)
	}
	f.e.local.finish(f, &resp)
	return stored
}

// record is the completed record f stored with resp, for the replay cache
// and the duplicates waiting on f.
func (f *flight) record(resp Response) *record {
	return &record{Fingerprint: f.fp, State: store.Completed, Response: &resp, CreatedAt: f.now, ExpiresAt: f.expires}
}

// store completes the record with resp, or commits it with the
// transaction. A failed commit rolls back and releases the key, and store
// returns false; a Complete that fails for another reason than a lost
// claim is retried in the background.
func (f *flight) store(resp Response) bool {
	e := f.e
	resp = e.seal(f.scope, f.key, resp)
	now := e.clockNow()
	expires := now.Add(f.retention)
	f.expires = expires
	var err error
	if f.tx != nil {
		ctx := f.storeCall(true)
		f.learned = ctx.began
		err = f.tx.Commit(ctx, store.Completion{Result: encodeResult(&resp), Failed: failedResult(&resp), Now: now, ExpiresAt: expires})
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
	f.learned = ctx.began
	err = e.store.Complete(ctx, f.hold(), store.Completion{Result: encodeResult(&resp), Now: now, ExpiresAt: expires})
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
		f.e.beats.remove(f) // the background task extends from now on
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
// holds turned out truncated (a stream whose handler panicked), in
// either state: a Complete that failed may have landed. The delete is
// token-checked: if the record expired and a retry claimed the key
// meanwhile, that claim stays. A failure is retried in the background.
func (f *flight) evict() {
	e := f.e
	ev, ok := e.store.(store.Evicter)
	if !ok {
		f.ev.Err = fmt.Errorf("idem: a streamed response's handler panicked after its record was completed, and %T cannot evict it (store.Evicter): retries replay its status and headers", e.store)
		f.release() // a Complete that failed and did not land left the claim
		return
	}
	ctx := f.storeCall(true)
	err := ev.Evict(ctx, f.hold())
	e.endCall(ctx, StoreEvict, err, &f.ev.Finish)
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		f.ev.Err = err
		e.bg.add(f.task(taskEvict, Response{}))
	}
}

// release deletes this flight's claim; a failure other than a lost claim
// is retried in the background within the lease.
func (f *flight) release() {
	e := f.e
	ctx := f.storeCall(true)
	err := e.store.Release(ctx, f.hold())
	e.endCall(ctx, StoreRelease, err, &f.ev.Finish)
	if f.txClaim && errors.Is(err, ErrLeaseLost) {
		// The claim was the transaction's, and went with its rollback:
		// the release found nothing, as it should.
		err = nil
	}
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
	// The observer is the user's code: should it panic, a pending
	// completion still lands and the waiters still wake.
	defer f.e.local.release(f)
	defer f.launch()
	f.e.cfg.observer(f.ctx, f.ev)
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
