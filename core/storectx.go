package idem

import (
	"context"
	"sync"
	"time"
)

// storeCtx is the context of one store call: the request's values, a
// deadline, and, unless detached, the request's cancellation. It starts
// its timer only when a store asks for Done, so a store that never blocks
// (memstore) pays one allocation instead of a timer and two contexts.
type storeCtx struct {
	parent   context.Context
	deadline time.Time
	began    time.Time
	detached bool // after the handler: the client's hang-up does not cancel

	once   sync.Once
	mu     sync.Mutex
	done   chan struct{}
	err    error
	timer  *time.Timer
	stop   func() bool
	afters map[int]func() // AfterFunc callbacks waiting for the end
	nextID int
}

// closedChan is the Done of a context released before anyone asked.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// storeContext returns a context for one store call that ends after
// timeout. Call cancel when the call returns.
func storeContext(parent context.Context, timeout time.Duration, detached bool) *storeCtx {
	c := new(storeCtx)
	c.init(parent, timeout, detached)
	return c
}

// init makes c a fresh context for one store call; c must not be in use.
func (c *storeCtx) init(parent context.Context, timeout time.Duration, detached bool) {
	now := time.Now()
	*c = storeCtx{parent: parent, began: now, deadline: now.Add(timeout), detached: detached}
}

// storeCall starts one timed store call: its context ends after the store
// timeout, and, unless detached, with parent. Every store call the engine
// makes is storeCall, the call, endCall:
//
//	ctx := e.storeCall(parent, false)
//	res, err := e.store.Claim(ctx, c)
//	e.endCall(ctx, StoreClaim, err, &ev.Claim)
func (e *Engine) storeCall(parent context.Context, detached bool) *storeCtx {
	return storeContext(parent, e.cfg.storeTimeout, detached)
}

// endCall ends a call started with storeCall: it tells the store observer
// and adds the call's time to *took, when took is not nil.
func (e *Engine) endCall(ctx *storeCtx, op StoreOp, err error, took *time.Duration) {
	d := time.Since(ctx.began)
	if took != nil {
		*took += d
	}
	if e.cfg.storeObserver != nil {
		e.cfg.storeObserver(ctx, op, d, err)
	}
	ctx.release()
}

func (c *storeCtx) Deadline() (time.Time, bool) {
	if !c.detached {
		if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
			return d, true
		}
	}
	return c.deadline, true
}

func (c *storeCtx) Value(key any) any { return c.parent.Value(key) }

func (c *storeCtx) Done() <-chan struct{} {
	c.once.Do(c.start)
	return c.done
}

func (c *storeCtx) start() {
	c.mu.Lock()
	c.done = make(chan struct{})
	c.mu.Unlock()
	if err := c.checkErr(); err != nil {
		c.cancel(err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.cancel(context.DeadlineExceeded) })
	if !c.detached {
		c.stop = context.AfterFunc(c.parent, func() { c.cancel(c.parent.Err()) })
	}
}

func (c *storeCtx) cancel(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	close(c.done)
	for _, f := range c.afters {
		go f()
	}
	c.afters = nil
}

// AfterFunc arranges for f to run in its own goroutine once the context
// ends, as context.AfterFunc does; context.AfterFunc finds this method,
// so a store that watches its context (pgx does, on every query) costs no
// goroutine per call.
func (c *storeCtx) AfterFunc(f func()) func() bool {
	c.once.Do(c.start)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	if c.afters == nil {
		c.afters = make(map[int]func(), 1)
	}
	id := c.nextID
	c.nextID++
	c.afters[id] = f
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.afters[id]
		delete(c.afters, id)
		return ok
	}
}

// checkErr reports the context's error from the clock and the parent,
// without starting the timer.
func (c *storeCtx) checkErr() error {
	if !c.detached {
		if err := c.parent.Err(); err != nil {
			return err
		}
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *storeCtx) Err() error {
	c.mu.Lock()
	started := c.done != nil
	err := c.err
	c.mu.Unlock()
	if started || err != nil {
		return err
	}
	if c.checkErr() == nil {
		return nil
	}
	// Over: make Done consistent with Err.
	c.once.Do(c.start)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// release stops the timer and the parent's watch, if they were started.
func (c *storeCtx) release() {
	// A Done after the call is over gets a closed channel.
	started := true
	c.once.Do(func() {
		started = false
		c.mu.Lock()
		c.done = closedChan
		c.err = context.Canceled
		c.mu.Unlock()
	})
	if !started {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = context.Canceled
		close(c.done)
		for _, f := range c.afters {
			go f()
		}
		c.afters = nil
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.stop != nil {
		c.stop()
	}
}
