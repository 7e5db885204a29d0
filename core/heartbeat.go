package idem

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idem/core/store"
)

// beats is the engine's heartbeat: one timer, armed while flights are in
// the air, that extends each flight's claim every third of its lease. A
// flight joins when its run begins and leaves when it settles; a flight
// shorter than a beat costs a lock and a few pointer writes, and no
// Extend. The timer disarms itself at its first tick with no flight left,
// so a steady stream of short requests arms it once per period, and no
// goroutine outlives the last flight (a testing/synctest bubble ends
// cleanly).
type beats struct {
	e      *Engine
	mu     sync.Mutex
	head   *flight // a doubly linked list through beatState
	timer  *time.Timer
	period time.Duration
	fire   func() // b.tick, bound once
}

// beatState is a flight's place in the heartbeat.
type beatState struct {
	prev, next *flight
	in         bool
	every      time.Duration
	due        time.Time // wall clock
	busy       bool      // an Extend is running
}

// add puts f in the heartbeat, when the engine has one.
func (b *beats) add(f *flight) {
	e := b.e
	if !e.cfg.beat {
		return
	}
	every := e.beatEvery(f.lease)
	period := max(every/2, time.Millisecond)
	// The first beat is due a beat after the lease began (the claim, or
	// the Extend that confirmed a late claim answer), not after now: a
	// claim answer that came late, or a slow BeginTx, has used part of
	// the lease already, and may have made the beat due at once.
	now := time.Now()
	left := time.Unix(0, f.leaseEnd.Load()).Sub(e.clockNow())
	due := now.Add(left - f.lease + every)
	b.mu.Lock()
	f.beat = beatState{next: b.head, in: true, every: every, due: due}
	if b.head != nil {
		b.head.beat.prev = f
	}
	b.head = f
	first := period
	if !due.After(now) {
		first = 0 // due already: a late claim answer, a slow BeginTx
	}
	switch {
	case b.timer == nil:
		if b.fire == nil {
			b.fire = b.tick
		}
		b.period = period
		b.timer = time.AfterFunc(first, b.fire)
	case period < b.period || first == 0:
		// A tick now serves what is due and re-arms at the shorter
		// period: resetting to the period could put off a beat another
		// flight is about to need.
		b.period = min(b.period, period)
		b.timer.Reset(0)
	}
	b.mu.Unlock()
}

// remove takes f out of the heartbeat. An Extend already running for f may
// still finish: a beat after the record settled finds it completed or
// gone and changes nothing.
func (b *beats) remove(f *flight) {
	if !b.e.cfg.beat {
		return
	}
	b.mu.Lock()
	if f.beat.in {
		if f.beat.prev != nil {
			f.beat.prev.beat.next = f.beat.next
		} else {
			b.head = f.beat.next
		}
		if f.beat.next != nil {
			f.beat.next.beat.prev = f.beat.prev
		}
		f.beat.prev, f.beat.next, f.beat.in = nil, nil, false
	}
	b.mu.Unlock()
}

// tick starts an Extend for each flight whose beat is due, and arms the
// timer again while flights remain.
func (b *beats) tick() {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.head == nil {
		b.timer = nil // disarmed: the next flight arms a new one
		return
	}
	var due []*flight
	for f := b.head; f != nil; f = f.beat.next {
		if !f.beat.busy && !now.Before(f.beat.due) {
			f.beat.busy = true
			f.beat.due = now.Add(f.beat.every)
			if b.e.batch == nil {
				go b.extend(f)
			} else {
				due = append(due, f)
			}
		}
	}
	if len(due) > 0 {
		go b.extendBatch(due)
	}
	b.timer.Reset(b.period)
}

// extend moves f's lease end.
func (b *beats) extend(f *flight) {
	e := b.e
	now := e.clockNow()
	ctx := e.storeCall(f.ctx, true)
	err := e.extender.Extend(ctx, f.hold(), now, now.Add(f.lease))
	e.endCall(ctx, StoreExtend, err, nil)
	b.beaten(f, now, err)
}

// extendBatch moves the lease ends of fs in one BatchExtender call.
func (b *beats) extendBatch(fs []*flight) {
	e := b.e
	now := e.clockNow()
	refs := make([]store.Extension, len(fs))
	for i, f := range fs {
		refs[i] = store.Extension{Hold: f.hold(), LeaseEnd: now.Add(f.lease)}
	}
	ctx := e.storeCall(context.Background(), true)
	errs := e.batch.ExtendBatch(ctx, now, refs)
	var first error
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrLeaseLost) {
			first = err
			break
		}
	}
	e.endCall(ctx, StoreExtend, first, nil)
	for i, f := range fs {
		err := errors.New("idem: the store's ExtendBatch returned fewer errors than claims")
		if i < len(errs) {
			err = errs[i]
		}
		b.beaten(f, now, err)
	}
}

// beaten records the end of f's beat: its new lease end, or a claim found
// lost, which is marked and not beaten again.
func (b *beats) beaten(f *flight, now time.Time, err error) {
	e := b.e
	if err == nil {
		f.leaseEnd.Store(now.Add(f.lease).UnixNano())
	}
	lost := errors.Is(err, ErrLeaseLost)
	if lost {
		f.lost.Store(true)
		// Evicted, or taken over: duplicates here ask the store again.
		e.local.drop(f)
	}
	b.mu.Lock()
	f.beat.busy = false
	if err != nil && !lost {
		// The store did not answer: try again at the next tick, half an
		// interval on, not a whole interval after this try.
		f.beat.due = time.Now()
	}
	b.mu.Unlock()
	if lost {
		b.remove(f)
	}
}

// beatEvery returns how often a claim with this lease is extended: a
// third of the lease, or the heartbeat interval when that is shorter, at
// least a millisecond. Without an interval set, on a store that fails
// over, it is at most half of what the lease leaves after the failover
// and the store timeout (see config.outlast), when that is minBeat or
// more.
func (e *Engine) beatEvery(lease time.Duration) time.Duration {
	every := lease / 3
	switch c := &e.cfg; {
	case c.heartbeat > 0:
		every = min(c.heartbeat, every)
	case c.failover > 0:
		// A route's lease shorter than the failover needs (a short TTL)
		// cannot outlast it however often it beats: a third, then.
		if fit := (lease - c.failover - c.storeTimeout) / 2; fit >= minBeat {
			every = min(every, fit)
		}
	}
	return max(every, time.Millisecond)
}
