package idem

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idemkit/idem/core/store"
)

// background holds the store calls that must still land after the request
// that needed them has been answered: a completion that failed because the
// store blipped (the client got its response; a retry must replay it, not
// run the handler again), and the release of a claim that may be held
// although nobody will finish it (an orphan of a failed Claim, or a
// release after a 5xx that failed). Each is retried with backoff capped at
// maxBackoff, so it lands within about a second of the store's return.
// The memory it holds is bounded by the engine's max pending bytes: when a
// new task would pass it, the oldest are dropped and their keys free at
// their lease end.
type background struct {
	e *Engine

	mu     sync.Mutex
	tasks  []*task           // oldest first
	keys   map[[2]string]int // scope and key of pending completions
	bytes  int64
	closed bool
	wg     sync.WaitGroup
}

// The backoff between tries of a background task.
const (
	minBackoff = 25 * time.Millisecond
	maxBackoff = time.Second
)

// backoff is the engine's one capped exponential backoff: between the
// tries of a background task (with full jitter), and between the polls of
// a request waiting for a key in flight.
type backoff struct{ d, max time.Duration }

// grow doubles the backoff, up to its cap.
func (b *backoff) grow() { b.d = min(2*b.d, b.max) }

// jittered returns a uniformly random wait of at least a millisecond and
// at most the backoff, then grows it.
func (b *backoff) jittered() time.Duration {
	d := time.Millisecond + rand.N(b.d)
	b.grow()
	return d
}

// taskOverhead is what a task costs beyond its response's bytes, for the
// bound on pending bytes.
const taskOverhead = 512

type taskKind uint8

const (
	taskComplete taskKind = iota + 1
	taskRelease
	taskEvict // a truncated answer's record, in either state (the store is an Evicter)
)

// task is one pending store call.
type task struct {
	kind              taskKind
	scope, key, token string
	fingerprint       string
	resp              Response      // taskComplete: the response to store, its body owned by the task
	retention         time.Duration // taskComplete: how long the record is replayed
	lease             time.Duration // the claim's lease
	leaseEnd          time.Time     // the claim's lease end as last set, on the engine's clock
	ev                Event         // the request's event, for the task's own
	ctx               context.Context
	start             time.Time
	size              int64
	stop              chan struct{} // closed when the task is dropped
	stopErr           error         // why, set before stop is closed
}

func newBackground(e *Engine) *background { return &background{e: e} }

// add starts t, dropping the oldest tasks when t would pass the bound. A
// completion larger than the whole bound on its own is kept without its
// body (as a response over the cap is), so it evicts nothing and its key
// still settles; a retry then gets its status and headers. A task added
// after Close is dropped at once.
func (b *background) add(t *task) {
	t.stop = make(chan struct{})
	t.start = time.Now()
	t.size = t.measure()
	if t.size > b.e.cfg.maxPendingBytes && t.kind == taskComplete && !t.resp.BodyOmitted {
		t.resp = t.resp.WithoutBody()
		t.size = t.measure()
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.report(t, errEngineClosed)
		return
	}
	if t.size > b.e.cfg.maxPendingBytes {
		// Even without a body it does not fit: the bound holds, and the
		// others stay.
		b.mu.Unlock()
		b.report(t, errPendingFull)
		return
	}
	for len(b.tasks) > 0 && b.bytes+t.size > b.e.cfg.maxPendingBytes {
		old := b.tasks[0] // its goroutine sees stop and reports the drop
		b.tasks = b.tasks[1:]
		b.track(old, -1)
		b.bytes -= old.size
		old.stopErr = errPendingFull
		close(old.stop)
	}
	b.tasks = append(b.tasks, t)
	b.track(t, 1)
	b.bytes += t.size
	b.wg.Add(1)
	b.mu.Unlock()
	go b.run(t)
}

// completing reports whether a completion for (scope, key) is pending.
func (b *background) completing(scope, key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.keys[[2]string{scope, key}] > 0
}

// track counts t's key among those with a pending completion (d is 1 when
// t is added, -1 when it leaves). b.mu must be held.
func (b *background) track(t *task, d int) {
	if t.kind != taskComplete {
		return
	}
	k := [2]string{t.scope, t.key}
	if n := b.keys[k] + d; n > 0 {
		if b.keys == nil {
			b.keys = make(map[[2]string]int)
		}
		b.keys[k] = n
	} else {
		delete(b.keys, k)
	}
}

// remove takes t off the list when it ends by itself.
// measure returns what t counts against the bound: its response's body
// and header bytes and a fixed overhead.
func (t *task) measure() int64 {
	n := taskOverhead + int64(len(t.resp.Body))
	for k, vs := range t.resp.Header {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v))
		}
	}
	return n
}

func (b *background) remove(t *task) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, x := range b.tasks {
		if x == t {
			b.tasks = append(b.tasks[:i], b.tasks[i+1:]...)
			b.track(t, -1)
			b.bytes -= t.size
			return
		}
	}
}

var (
	errPendingFull  = errors.New("idem: dropped: the engine's pending background work reached its bound (WithMaxPendingBytes)")
	errEngineClosed = errors.New("idem: dropped: the engine is closed")
	errRetryBound   = errors.New("idem: the store did not take the completion within the completion retry limit")
)

func (b *background) run(t *task) {
	defer b.wg.Done()
	bo := backoff{minBackoff, maxBackoff}
	for try := 0; ; try++ {
		if try > 0 {
			timer := time.NewTimer(bo.jittered())
			select {
			case <-t.stop:
				timer.Stop()
				b.report(t, t.stopErr)
				return
			case <-timer.C:
			}
		} else {
			select {
			case <-t.stop:
				b.report(t, t.stopErr)
				return
			default:
			}
		}
		done, err := b.try(t)
		if done {
			b.remove(t)
			b.report(t, err)
			return
		}
		t.ev.Err = err
		if bound := b.bound(t); bound != nil {
			b.remove(t)
			b.report(t, bound)
			return
		}
	}
}

// bound reports why t must give up, or nil: a completion after the
// completion retry limit; a release once its claim's lease has ended,
// when it would free the key anyway.
func (b *background) bound(t *task) error {
	e := b.e
	switch t.kind {
	case taskComplete, taskEvict:
		if time.Since(t.start) >= e.cfg.completionRetry {
			return errRetryBound
		}
	case taskRelease:
		if time.Since(t.start) >= t.lease || !e.clockNow().Before(t.leaseEnd) {
			return errLeaseOver
		}
	}
	return nil
}

var errLeaseOver = errors.New("idem: the store did not take the release before the claim's lease ended; the key frees at the lease end")

// hold names the task's claim to the store.
func (t *task) hold() store.Hold {
	return store.Hold{Ref: store.Ref{Scope: t.scope, Key: t.key}, Token: t.token}
}

// try makes one attempt. done reports that the task is over, with err nil
// when it landed.
func (b *background) try(t *task) (done bool, err error) {
	e := b.e
	switch t.kind {
	case taskRelease:
		ctx := e.storeCall(t.ctx, true)
		err = e.store.Release(ctx, t.hold())
		e.endCall(ctx, StoreRelease, err, &t.ev.Finish)
		if err == nil || errors.Is(err, ErrLeaseLost) {
			return true, nil // released, or nothing held: either way free
		}
		return false, err
	case taskEvict:
		ctx := e.storeCall(t.ctx, true)
		err = e.store.(store.Evicter).Evict(ctx, t.hold())
		e.endCall(ctx, StoreEvict, err, &t.ev.Finish)
		if err == nil || errors.Is(err, ErrLeaseLost) {
			return true, nil // gone, or another claim's now: either way not replayed
		}
		return false, err
	}
	now := e.clockNow()
	if e.extender != nil && !now.Before(t.leaseEnd.Add(e.beatEvery(t.lease)-t.lease)) {
		// Keep the claim alive on the heartbeat's schedule, so a retry
		// meanwhile waits for the replay and a store that comes back
		// late still finds the claim held.
		ctx := e.storeCall(t.ctx, true)
		err := e.extender.Extend(ctx, t.hold(), now, now.Add(t.lease))
		e.endCall(ctx, StoreExtend, err, &t.ev.Finish)
		switch {
		case err == nil:
			t.leaseEnd = now.Add(t.lease)
		case errors.Is(err, ErrLeaseLost):
			return true, b.lost(t, err)
		}
	}
	ctx := e.storeCall(t.ctx, true)
	err = e.store.Complete(ctx, t.hold(), store.Completion{Result: encodeResult(&t.resp), Now: now, ExpiresAt: now.Add(t.retention)})
	e.endCall(ctx, StoreComplete, err, &t.ev.Finish)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrLeaseLost):
		return true, b.lost(t, err)
	}
	return false, err
}

// lost decides what a completion's ErrLeaseLost means: an earlier try that
// timed out may have landed after all, which a store that can look the
// record up tells; otherwise the claim was lost.
func (b *background) lost(t *task, err error) error {
	e := b.e
	g, ok := e.store.(store.Getter)
	if !ok {
		return err
	}
	ctx := e.storeCall(t.ctx, true)
	rec, found, gerr := g.Get(ctx, t.hold().Ref, e.clockNow())
	e.endCall(ctx, StoreGet, gerr, &t.ev.Finish)
	want := encodeResult(&t.resp)
	if gerr == nil && found && rec.State == store.Completed && rec.Fingerprint == t.fingerprint &&
		bytes.Equal(rec.Result.Head, want.Head) &&
		(bytes.Equal(rec.Result.Body, want.Body) || rec.Result.BodyOmitted) { // the store may drop a body it cannot keep
		return nil
	}
	return err
}

// report sends the task's own event: err nil means it landed.
func (b *background) report(t *task, err error) {
	ev := t.ev
	ev.Err = err
	ev.Total = time.Since(t.start)
	switch {
	case t.kind != taskComplete && err == nil:
		return // released or evicted: the request's event already told
	case t.kind != taskComplete:
		ev.Outcome = OutcomeReleaseFailed
	case err == nil:
		ev.Outcome = OutcomeCompletedLate
	case errors.Is(err, ErrLeaseLost):
		ev.Outcome = OutcomeCompletionLost
	case errors.Is(err, errRetryBound):
		ev.Outcome = OutcomeCompletionExpired
	default:
		ev.Outcome = OutcomeCompletionDropped
	}
	b.e.cfg.observer(t.ctx, ev)
}

// close stops taking tasks and waits until the pending ones end or ctx
// does; then the rest are dropped.
func (b *background) close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	for _, t := range b.tasks {
		t.stopErr = errEngineClosed
		close(t.stop)
	}
	b.tasks, b.bytes, b.keys = nil, 0, nil
	b.mu.Unlock()
	return ctx.Err()
}

// pending returns the number of tasks in flight, for tests.
func (b *background) pending() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.tasks)
}

// Close finishes the engine's background work for a graceful shutdown:
// it waits until every pending completion and release has landed, or
// given up, or ctx ends, when the rest are dropped (their keys free at
// their lease end) and ctx's error is returned. Call it after the server
// has stopped taking requests; a completion that fails after Close is not
// retried. Close is safe to call more than once.
//
//	srv.Shutdown(ctx)
//	engine.Close(ctx)
func (e *Engine) Close(ctx context.Context) error { return e.bg.close(ctx) }
