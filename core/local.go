package idem

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/core/store"
)

// This file is the single flight in the process: while a request of this
// engine holds a key, a duplicate that reaches the same engine learns it
// here instead of asking the store, so a retry storm costs the store one
// claim per key. In wait mode the duplicate waits on the running flight
// and replays its answer as soon as it is stored.

// localFlights are the keys this engine's requests hold.
type localFlights struct {
	mu sync.Mutex
	m  map[localKey]*localFlight
}

type localKey struct{ scope, key string }

// localFlight is one key held by a request of this engine.
type localFlight struct {
	fp       string
	leaseEnd *atomic.Int64 // the flight's lease end (Unix ns, engine clock): past it, the store decides
	done     chan struct{} // closed once the flight has ended; made by the first waiter
	waiters  int           // duplicates waiting on done; under localFlights.mu
	rec      *record       // the completed record, set before done closes; nil when released
	settled  bool          // finish ran; only the holding flight's goroutine touches it
}

// add registers f as the holder of its key, unless a holder is known.
func (l *localFlights) add(f *flight) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := localKey{f.scope, f.key}
	if _, ok := l.m[k]; ok {
		return
	}
	if l.m == nil {
		l.m = make(map[localKey]*localFlight)
	}
	f.held = localFlight{fp: f.fp, leaseEnd: &f.leaseEnd}
	f.lf = &f.held
	l.m[k] = f.lf
}

// join returns the flight that holds the key in this process, or nil; a
// waiter joins it, so that its answer is kept for the waiter.
func (l *localFlights) join(scope, key string, wait bool) *localFlight {
	l.mu.Lock()
	defer l.mu.Unlock()
	lf := l.m[localKey{scope, key}]
	if lf != nil && wait {
		lf.waiters++
		if lf.done == nil {
			lf.done = make(chan struct{}) // made for the first waiter only
		}
	}
	return lf
}

// finish ends f's hold on its key, once: resp, when not nil, is the
// response f stored, kept for the duplicates waiting (its body and
// headers copied, since the request's do not outlive it). They wake when
// f ends (release), after its event is reported.
func (l *localFlights) finish(f *flight, resp *Response) {
	lf := f.lf
	if lf == nil || lf.settled {
		return
	}
	lf.settled = true
	l.mu.Lock()
	if k := (localKey{f.scope, f.key}); l.m[k] == lf {
		delete(l.m, k)
	}
	waiters := lf.waiters
	l.mu.Unlock()
	if resp != nil && waiters > 0 {
		cp := *resp
		cp.Body, cp.Header = bytes.Clone(cp.Body), cp.Header.Clone()
		lf.rec = f.record(cp)
	}
}

// release wakes the duplicates waiting on f, at its end.
func (l *localFlights) release(f *flight) {
	if lf := f.lf; lf != nil {
		l.finish(f, nil)
		f.lf = nil
		// No one joins once finish has removed the key, so done is read
		// here after the last waiter made it, under l.mu.
		if lf.done != nil {
			close(lf.done)
		}
	}
}

// forget drops the hold on a key, for an eviction through this engine's
// admin handler: the next duplicate asks the store (and runs).
func (l *localFlights) forget(scope, key string) {
	l.mu.Lock()
	delete(l.m, localKey{scope, key})
	l.mu.Unlock()
}

// drop drops f's hold on its key, if it still has it, from another
// goroutine than f's (the heartbeat's, which found the claim lost).
func (l *localFlights) drop(f *flight) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := localKey{f.scope, f.key}
	if lf := l.m[k]; lf != nil && lf.leaseEnd == &f.leaseEnd {
		delete(l.m, k)
	}
}

// local decides from the flight that holds the key in this process, if
// any: ok false when there is none, or its lease had ended, and the store
// is to be asked. A wait on it that ends without an answer to replay (it
// released the key, its lease ran out, or its answer is still on its way
// to the store) goes on as a wait on the store, within the same limit, so
// that it never runs unprotected or beside a pending completion.
func (f *flight) local() (outcome, bool) {
	e := f.e
	lf := e.local.join(f.scope, f.key, e.cfg.wait > 0)
	switch {
	case lf == nil:
		return outcome{}, false
	case !e.clockNow().Before(time.Unix(0, lf.leaseEnd.Load())):
		// Its lease has ended (no heartbeat, or one that failed): the
		// store's rule decides, as for a flight of another process.
		return outcome{}, false
	case lf.fp != f.fp:
		f.ev.Outcome = OutcomeFingerprintMismatch
		return outcome{verdict: mismatch, rec: &record{State: store.InProgress, Fingerprint: lf.fp}}, true
	case e.cfg.wait == 0:
		f.ev.Outcome = OutcomeConflict
		return outcome{verdict: inFlight, rec: lf.inProgress(f)}, true
	}
	end := f.waitDeadline()
	defer func() { f.ev.Waited = time.Since(f.waitFrom) }()
	deadline := time.NewTimer(time.Until(end))
	defer deadline.Stop()
	for {
		// Wake at the lease end too: the heartbeat may have moved it;
		// if not, the store decides.
		left := time.Unix(0, lf.leaseEnd.Load()).Sub(e.clockNow())
		if left <= 0 {
			return f.wait(lf.inProgress(f)), true
		}
		lease := time.NewTimer(left)
		select {
		case <-lf.done:
			lease.Stop()
			if lf.rec == nil {
				return f.wait(lf.inProgress(f)), true
			}
			f.ev.Outcome = OutcomeReplayedAfterWait
			return outcome{verdict: replay, rec: lf.rec}, true
		case <-lease.C:
		case <-deadline.C:
			lease.Stop()
			f.ev.Outcome = OutcomeWaitTimeout
			return outcome{verdict: inFlight, rec: lf.inProgress(f)}, true
		case <-f.ctx.Done():
			lease.Stop()
			return f.waitCanceled(), true
		}
	}
}

// inProgress is the record a duplicate f answers 409 from: the lease end
// bounds its Retry-After, as a record from the store would.
func (lf *localFlight) inProgress(f *flight) *record {
	f.now = f.e.clockNow()
	return &record{State: store.InProgress, Fingerprint: f.fp, LeaseEnd: time.Unix(0, lf.leaseEnd.Load())}
}
