package idem

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idem/core/store"
)

// This file aligns the engine's time with the store's clock. Leases are
// judged by comparing the now the engine passes to the store with the
// lease ends other engines wrote; when instances' clocks disagree, one
// could take over another's live claim. A store that several engines
// share and that can tell its own time (Clock) gives them one clock: each
// engine measures the difference between its clock and the store's, and
// adds it to every now it passes.

// Clock alignment settings.
const (
	// clockResync is how often the difference is measured again, on the
	// wall clock: enough to follow a store clock that NTP slews, short
	// enough that two clocks' drift apart (well under 1 ms a minute)
	// stays small beside the sampling error.
	clockResync = time.Minute
	// clockSamples is how many round trips a measurement takes; the one
	// with the shortest round trip bounds the error best.
	clockSamples = 3
)

// storeClock keeps the difference between the engine's clock and the
// store's.
type storeClock struct {
	src store.Clock

	mu      sync.Mutex
	pending *firstSync // the first measurement, while it runs
	synced  bool
	offset  time.Duration // store time - engine clock
	err     time.Duration // half the round trip of the sample offset came from
	at      time.Time     // wall time of the last measurement
	running bool          // a measurement is under way
	frozen  bool          // the engine's clock was moved by hand: keep offset

	// The engine clock's and the wall clock's readings when offset was
	// measured: a clock that has since moved at another pace than the
	// wall clock was moved by hand (a test's clock).
	baseClock, baseWall time.Time
	baseSlack           time.Duration // how long reading baseClock took (readClocks)
}

// firstSync is the first measurement of the store's clock, which the
// callers that need the time meanwhile share: they wait for it, each as
// long as its own context lets it, and get its error.
type firstSync struct {
	done     chan struct{}
	err      error
	canceled bool // its caller's context ended: the error is not the store's
}

// clockTolerance is how far an engine clock may drift from the wall clock
// over d and still count as keeping pace with it: a millisecond, plus a
// thousandth of d (far more than any quartz clock drifts).
func clockTolerance(d time.Duration) time.Duration { return time.Millisecond + d/1000 }

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// now returns the engine's time: its clock, moved to the store's clock
// when the store has one. The first call measures the difference with one
// round trip, bounded by ctx and the store timeout, and refines it in the
// background; later calls measure it again in the background once it is
// older than clockResync. A failed first measurement is returned: the
// store is not answering, so the call that needed the time would fail too.
func (e *Engine) now(ctx context.Context) (time.Time, error) {
	sc := e.sclock
	if sc == nil {
		return e.cfg.clock(), nil
	}
	sc.mu.Lock()
	synced, offset := sc.synced, sc.offset
	stale := synced && !sc.running && !sc.frozen && time.Since(sc.at) >= clockResync
	if stale {
		sc.running = true
	}
	sc.mu.Unlock()
	switch {
	case !synced:
		var err error
		if offset, err = e.firstSync(ctx); err != nil {
			return time.Time{}, err
		}
	case stale:
		go e.resync()
	}
	return e.cfg.clock().Add(offset), nil
}

// firstSync makes the first measurement, or waits for the one under way
// and shares its outcome; a measurement cut short by its caller's context
// is made again by the next caller. It returns the offset.
func (e *Engine) firstSync(ctx context.Context) (time.Duration, error) {
	sc := e.sclock
	for {
		sc.mu.Lock()
		if sc.synced {
			offset := sc.offset
			sc.mu.Unlock()
			return offset, nil
		}
		p := sc.pending
		if p == nil {
			p = &firstSync{done: make(chan struct{})}
			sc.pending = p
			sc.mu.Unlock()
			p.err = e.syncClock(ctx, 1)
			p.canceled = p.err != nil && ctx.Err() != nil
			sc.mu.Lock()
			sc.pending = nil
			offset := sc.offset
			if p.err == nil {
				sc.running = true
			}
			sc.mu.Unlock()
			close(p.done)
			if p.err != nil {
				return 0, p.err
			}
			go e.resync()
			return offset, nil
		}
		sc.mu.Unlock()
		select {
		case <-p.done:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if p.err != nil && !p.canceled {
			return 0, p.err
		}
	}
}

// resync measures the difference again, in the background; a failure
// keeps the last one, and a later call tries again.
func (e *Engine) resync() {
	ctx, cancel := context.WithTimeout(context.Background(), clockSamples*e.cfg.storeTimeout)
	defer cancel()
	_ = e.syncClock(ctx, clockSamples)
}

// clockNow is now for the engine's own background work, which has no
// caller to fail: before the first measurement it is the engine's clock.
func (e *Engine) clockNow() time.Time {
	if sc := e.sclock; sc != nil {
		sc.mu.Lock()
		offset := sc.offset
		sc.mu.Unlock()
		return e.cfg.clock().Add(offset)
	}
	return e.cfg.clock()
}

// syncClock measures the difference between the engine's clock and the
// store's over samples round trips, keeping the sample with the shortest
// one: the store read its time somewhere within that round trip, so its
// midpoint is off by at most half of it.
func (e *Engine) syncClock(ctx context.Context, samples int) error {
	sc := e.sclock
	defer func() {
		sc.mu.Lock()
		sc.running = false
		sc.mu.Unlock()
	}()
	var (
		best            time.Duration
		bestRTT         time.Duration = -1
		bestClock, wall time.Time
		bestSlack       time.Duration
		lastErr         error
	)
	for range samples {
		sctx := e.storeCall(ctx, false)
		t0, w0, s0 := e.readClocks()
		st, err := sc.src.Now(sctx)
		t1, w1, s1 := e.readClocks()
		e.endCall(sctx, StoreNow, err, nil)
		if err != nil {
			lastErr = err
			continue
		}
		rtt := max(t1.Sub(t0), 0)
		offset := st.Sub(t0.Add(rtt / 2))
		switch {
		case t1.Equal(t0):
			// A clock standing still (a test's manual clock) did not
			// move: its time is t0 all along, and the sample ranks by
			// the real round trip.
			rtt, offset = w1.Sub(w0), st.Sub(t0)
		case absDur(rtt-w1.Sub(w0)) > clockTolerance(rtt)+s0+s1:
			continue // the engine's clock was moved during the sample
		}
		if bestRTT < 0 || rtt < bestRTT {
			bestRTT, best, bestClock, wall, bestSlack = rtt, offset, t0, w0, s0
		}
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.at = time.Now() // retried after clockResync, not on every call
	if bestRTT < 0 {
		if lastErr == nil {
			lastErr = errors.New("idem: the engine's clock moved during every sample of the store's")
		}
		return lastErr
	}
	if sc.synced && absDur(bestClock.Sub(sc.baseClock)-wall.Sub(sc.baseWall)) > clockTolerance(wall.Sub(sc.baseWall))+bestSlack+sc.baseSlack {
		// The engine's clock was moved by hand since the last measurement
		// (a test's clock jumping ahead): a new difference would undo the
		// move. Keep the one measured before it, from now on.
		sc.frozen = true
		return nil
	}
	sc.synced, sc.offset, sc.err = true, best, bestRTT/2
	sc.baseClock, sc.baseWall, sc.baseSlack = bestClock, wall, bestSlack
	return nil
}

// readClocks reads the engine's clock between two readings of the wall
// clock: t is the engine's time, w the wall time just before it, and
// slack how long the engine's clock took to read. A goroutine paused
// between the readings (the scheduler, on a loaded machine) shifts t
// against w by up to slack, which is not a clock moved by hand.
func (e *Engine) readClocks() (t, w time.Time, slack time.Duration) {
	w = time.Now()
	t = e.cfg.clock()
	return t, w, time.Since(w)
}

// ClockOffset reports how far the engine moves its clock to agree with
// the store's (the store's time minus the engine clock's), and the bound
// on the error of that measurement: half the round trip of the sample it
// came from. ok is false when the store has no clock (see Clock) or the
// difference has not been measured yet.
func (e *Engine) ClockOffset() (offset, bound time.Duration, ok bool) {
	sc := e.sclock
	if sc == nil {
		return 0, 0, false
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.offset, sc.err, sc.synced
}
