package idem

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Engine applies the idempotency policy to requests. It is safe for
// concurrent use; build one per store with New and share it.
type Engine struct {
	cfg      config
	store    Store
	notifier Notifier
	extender Extender
	txb      TxBeginner
	def      *Policy
	bg       *background
}

// New returns an Engine that keeps its records in store. Every option
// documents its default. It returns an error wrapping ErrBadOption when an
// option's value is invalid.
func New(store Store, opts ...Option) (*Engine, error) {
	if store == nil {
		return nil, badOption("nil store")
	}
	e := &Engine{cfg: defaultConfig(), store: store}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&e.cfg); err != nil {
			return nil, err
		}
	}
	e.notifier, _ = store.(Notifier)
	e.extender, _ = store.(Extender)
	e.txb, _ = store.(TxBeginner)
	c := &e.cfg
	switch {
	case !c.beatSet:
		c.beat = e.extender != nil
	case c.beat && e.extender == nil:
		return nil, badOption("heartbeat needs a store that implements idem.Extender; %T does not", store)
	}
	if c.lease == 0 {
		c.lease = DefaultLeaseNoBeat
		if c.beat {
			c.lease = DefaultLease
		}
	}
	if c.heartbeat > 0 && c.heartbeat >= c.lease {
		return nil, badOption("heartbeat interval %v must be shorter than the lease %v", c.heartbeat, c.lease)
	}
	e.bg = newBackground(e)
	e.def = e.Policy()
	return e, nil
}

// Lease returns the lease the engine gives claims, its default resolved
// for the store (see WithLease); a route's lease is at most its retention.
func (e *Engine) Lease() time.Duration { return e.cfg.lease }

// Store returns the engine's store.
func (e *Engine) Store() Store { return e.store }

// KeyHeader returns the canonical name of the header that carries the key.
func (e *Engine) KeyHeader() string { return e.cfg.keyHeader }

// Protects reports whether the engine handles requests with this method.
func (e *Engine) Protects(method string) bool {
	for _, m := range e.cfg.methods {
		if m == method {
			return true
		}
	}
	return false
}

// Policy is the engine's policy with per-route overrides, built once where a
// route or group is declared and used for each of its requests.
type Policy struct {
	e         *Engine
	required  bool
	skip      bool
	retention time.Duration
	routeFunc func(*http.Request) string
	overrides map[routeKey][]RouteOption
	compiled  map[routeKey]*Policy // overrides applied on top of this policy
}

// Policy returns the engine's policy with opts applied.
func (e *Engine) Policy(opts ...RouteOption) *Policy {
	p := &Policy{e: e, required: !e.cfg.keyOptional, retention: e.cfg.retention}
	for _, o := range opts {
		if o != nil {
			o(p)
		}
	}
	if len(p.overrides) > 0 {
		p.compiled = make(map[routeKey]*Policy, len(p.overrides))
		for k, ro := range p.overrides {
			q := *p
			q.overrides, q.compiled = nil, nil
			for _, o := range ro {
				if o != nil {
					o(&q)
				}
			}
			p.compiled[k] = &q
		}
	}
	return p
}

// Serve runs next for r under the engine's default policy; see
// Policy.Serve.
func (e *Engine) Serve(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	e.def.Serve(w, r, route, next)
}

// Serve runs next for r under idempotency protection. route is the route
// template the request matched (such as "/orders/{id}"); it scopes the key
// together with the method and the client's namespace. Adapters call Serve
// once they know the template.
//
// These requests go to next untouched, with w and r as given: a method the
// engine does not protect; a route marked Skip; no key where the key is
// optional; and a request whose w is, or wraps, the writer of a request
// the engine already protects (middleware mounted twice: the outer policy
// applies). Otherwise the request body is read (up to the cap) and replaced
// by an identical one, and next runs only if this request takes the
// claim, with a writer that buffers the response until it is stored or
// released.
func (p *Policy) Serve(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	if p.compiled != nil {
		if q, ok := p.compiled[routeKey{r.Method, route}]; ok {
			p = q
		}
	}
	e := p.e
	if !e.Protects(r.Method) || nested(w) {
		// A nested middleware (mounted globally and again on the route)
		// must not claim the key the outer one holds: the outer policy
		// applies.
		next.ServeHTTP(w, r)
		return
	}
	x := &run{p: p, w: w, r: r, next: next, start: time.Now()}
	x.ev.Method, x.ev.Route = r.Method, route
	if p.skip {
		x.skip()
		return
	}
	key, err := ParseKey(r.Header[e.cfg.keyHeader])
	if err != nil {
		if errors.Is(err, ErrMissingKey) {
			if !p.required {
				x.skip()
				return
			}
			x.fail(OutcomeMissingKey, problemMissingKey, "Send an "+e.cfg.keyHeader+" header with a unique key, such as a UUID.")
			return
		}
		x.fail(OutcomeInvalidKey, problemInvalidKey, strings.TrimPrefix(err.Error(), ErrInvalidKey.Error()+": "))
		return
	}
	x.key = key
	x.ev.key = key
	body, err := x.readBody(e.cfg.maxRequestBody)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(err, errBodyTooLarge):
			x.fail(OutcomeBodyTooLarge, problemBodyTooLarge, fmt.Sprintf("The request body is larger than %d bytes.", e.cfg.maxRequestBody))
		case errors.As(err, &mbe):
			x.fail(OutcomeBodyTooLarge, problemBodyTooLarge, fmt.Sprintf("The request body is larger than %d bytes.", mbe.Limit))
		default:
			x.fail(OutcomeBodyUnreadable, problemBodyUnreadable, "The request body could not be read.")
		}
		return
	}
	x.body.Reset(body)
	r.Body = &x.body
	r.ContentLength = int64(len(body))

	ns := ""
	if e.cfg.namespace != nil {
		ns = e.cfg.namespace(r)
	}
	x.scope = Scope(ns, r.Method, route)
	if e.cfg.fingerprint != nil {
		x.fp = e.cfg.fingerprint(r, body)
	} else {
		x.fp = fingerprintRequest(r, body)
	}
	x.token = newToken()
	res, err := x.claim()
	if err != nil {
		// The claim may have landed even though its answer did not (a
		// timeout): release it, token-checked, so it blocks nobody.
		x.releaseLater()
		x.storeFailure(err)
		return
	}
	if res.Acquired {
		x.execute()
		return
	}
	x.existing(res.Existing)
}

// run is the state of one protected request.
type run struct {
	p     *Policy
	w     http.ResponseWriter
	r     *http.Request
	next  http.Handler
	start time.Time
	key   string
	scope string
	fp    string
	token string
	now   time.Time // the clock at the last claim
	lease time.Duration
	// leaseEnd is the claim's lease end as last set (claim, heartbeat),
	// in Unix nanoseconds on the engine's clock.
	leaseEnd atomic.Int64
	// pending is the background completion of a streamed response whose
	// Complete failed, started once the handler returns.
	pending *task
	ev      Event
	lost    atomic.Bool // the heartbeat found the claim lost
	body    bodyReader  // the request body handed to the handler
	cw      capture     // the response writer handed to the handler
	cl      [1]string   // Content-Length of the buffered response

	stopHeartbeat func()
	completed     bool    // Complete (not a transaction) stored the record
	one           [1]byte // scratch for checking a body's end
}

func (x *run) done() {
	x.ev.Total = time.Since(x.start)
	x.p.e.cfg.observer(x.r.Context(), x.ev)
}

func (x *run) skip() {
	x.next.ServeHTTP(x.w, x.r)
	x.ev.Outcome = OutcomeSkipped
	x.done()
}

func (x *run) fail(o Outcome, k problemKind, detail string) {
	x.p.e.writeProblem(x.w, k, detail, 0)
	x.ev.Outcome, x.ev.Status = o, k.status
	x.done()
}

// ctx returns the context of a store call made after the handler ran: it
// keeps the request's values but not its cancellation, so a client that
// hangs up does not leave its key locked.
func (x *run) ctx() *storeCtx {
	return storeContext(x.r.Context(), x.p.e.cfg.storeTimeout, true)
}

func (x *run) claim() (ClaimResult, error) {
	e := x.p.e
	x.now = e.cfg.clock()
	x.lease = min(e.cfg.lease, x.p.retention)
	leaseEnd := x.now.Add(x.lease)
	x.leaseEnd.Store(leaseEnd.UnixNano())
	ctx := storeContext(x.r.Context(), e.cfg.storeTimeout, false)
	t := time.Now()
	res, err := e.store.Claim(ctx, Claim{
		Scope: x.scope, Key: x.key, Fingerprint: x.fp, Token: x.token,
		Now: x.now, LeaseEnd: leaseEnd,
	})
	d := time.Since(t)
	x.ev.Claim += d
	e.observeStore(ctx, StoreClaim, d, err)
	ctx.release()
	if err == nil && !res.Acquired && res.Existing == nil {
		err = fmt.Errorf("idem: %T.Claim returned neither a claim nor the existing record", e.store)
	}
	return res, err
}

func (x *run) storeFailure(err error) {
	e := x.p.e
	x.ev.Outcome, x.ev.Err = OutcomeStoreFailure, err
	if e.cfg.failOpen {
		x.ev.FailedOpen = true
		sw := statusWriter{ResponseWriter: x.w}
		x.next.ServeHTTP(&sw, x.r)
		x.ev.Status = sw.status
		x.done()
		return
	}
	e.writeProblem(x.w, problemStore, "The idempotency store failed or did not answer in time; retry with the same key.", e.retryAfterSecs(0))
	x.ev.Status = problemStore.status
	x.done()
}

// existing answers from a record that blocked the claim.
func (x *run) existing(rec *Record) {
	e := x.p.e
	if rec.Fingerprint != x.fp {
		x.fail(OutcomeFingerprintMismatch, problemMismatch, "This key was already used with a different method, path, query or body. Use a new key for a new request.")
		return
	}
	if rec.State == StateCompleted {
		if err := rec.Check(); err != nil {
			x.storeFailure(fmt.Errorf("idem: %T returned a record it cannot have written: %w", e.store, err))
			return
		}
		x.ev.Outcome, x.ev.Status = OutcomeReplayed, rec.Response.Status
		e.replay(x.w, rec.Response)
		x.done()
		return
	}
	if e.cfg.wait > 0 {
		x.wait(rec)
		return
	}
	x.conflict(OutcomeConflict, rec)
}

func (x *run) conflict(o Outcome, rec *Record) {
	e := x.p.e
	e.writeProblem(x.w, problemConflict, "A request with this key is still being processed; retry later.", e.retryAfterSecs(rec.LeaseEnd.Sub(x.now)))
	x.ev.Outcome, x.ev.Status = o, problemConflict.status
	x.done()
}

// wait waits for an in-progress claim to finish, then replays, runs, or
// gives up with 409.
func (x *run) wait(rec *Record) {
	e := x.p.e
	wstart := time.Now()
	deadline := time.NewTimer(e.cfg.wait)
	defer deadline.Stop()
	wctx, cancel := context.WithTimeout(x.r.Context(), e.cfg.wait)
	defer cancel()
	backoff := 10 * time.Millisecond
	for {
		var wake <-chan struct{}
		stop := func() {}
		if e.notifier != nil {
			if ch, s, err := e.notifier.Watch(wctx, x.scope, x.key); err == nil {
				wake, stop = ch, s
			}
		}
		// Look again now that the watch is in place, so a completion that
		// happened before it is not missed.
		res, err := x.claim()
		if err == nil && !res.Acquired {
			rec = res.Existing
		}
		if err == nil && !res.Acquired && res.Existing.State == StateInProgress && res.Existing.Fingerprint == x.fp {
			poll := time.NewTimer(backoff)
			select {
			case <-wake:
			case <-poll.C:
				backoff = min(backoff*2, 500*time.Millisecond)
			case <-deadline.C:
				poll.Stop()
				stop()
				x.ev.Waited = time.Since(wstart)
				x.conflict(OutcomeWaitTimeout, res.Existing)
				return
			case <-x.r.Context().Done():
				poll.Stop()
				stop()
				x.ev.Waited = time.Since(wstart)
				x.ev.Outcome, x.ev.Err = OutcomeWaitTimeout, x.r.Context().Err()
				x.done()
				return
			}
			poll.Stop()
			stop()
			continue
		}
		stop()
		x.ev.Waited = time.Since(wstart)
		switch {
		case err != nil:
			// The key is known to be in flight: never run unprotected
			// beside it, even with fail open. The claim may have landed.
			x.releaseLater()
			x.ev.Err = err
			x.conflict(OutcomeWaitTimeout, rec)
		case res.Acquired:
			x.execute()
		case res.Existing.Fingerprint != x.fp || res.Existing.Check() != nil:
			x.existing(res.Existing)
		default:
			x.ev.Outcome, x.ev.Status = OutcomeReplayedAfterWait, res.Existing.Response.Status
			e.replay(x.w, res.Existing.Response)
			x.done()
		}
		return
	}
}

// execute runs the handler under the claim this request holds.
func (x *run) execute() {
	e := x.p.e
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	x.cw = capture{w: x.w, max: e.cfg.maxResponseBody, buf: buf, run: x}
	c := &x.cw
	r := x.r
	if e.txb != nil {
		bctx := storeContext(r.Context(), e.cfg.storeTimeout, false)
		start := time.Now()
		t, err := e.txb.BeginTx(bctx, x.scope, x.key, x.token)
		e.observeStore(bctx, StoreBeginTx, time.Since(start), err)
		bctx.release()
		if err != nil {
			x.release()
			x.storeFailure(err)
			return
		}
		c.tx = t
		r = r.WithContext(t.Context(r.Context()))
	}
	x.stopHeartbeat = x.heartbeat()
	hstart := time.Now()
	finished := false
	defer func() {
		if finished {
			return
		}
		// The handler panicked: release the key and let the panic go on.
		x.stopHeartbeat()
		x.ev.Handler = time.Since(hstart)
		if c.tx != nil {
			x.rollback(c.tx)
		}
		switch {
		case c.hijacked:
		case !c.direct, x.pending != nil:
			x.release()
		case x.completed:
			// The stream had started and its record was completed (not in
			// a transaction, whose writes did commit): the client saw a
			// truncated response, so the record must go.
			x.evict()
		}
		x.ev.Outcome = OutcomeReleased
		x.done()
	}()
	x.next.ServeHTTP(c, r)
	finished = true
	x.stopHeartbeat()
	x.ev.Handler = time.Since(hstart)
	if buf.Cap() <= 64<<10 {
		defer bufPool.Put(buf)
	}

	switch {
	case c.hijacked:
		x.ev.Outcome = OutcomeReleased
		if c.tx != nil {
			x.rollback(c.tx)
		}
	case c.abandon:
		x.ev.Outcome = OutcomeReleased
		if c.tx != nil {
			x.rollback(c.tx)
		}
		x.release()
	case c.direct:
		// Streamed: stored or released when it started.
		if !c.discard {
			c.sendTrailers()
		}
		if x.pending != nil {
			e.bg.add(x.pending)
		}
	default:
		if c.status == 0 {
			c.WriteHeader(http.StatusOK)
		}
		c.sniff()
		if x.settle(c, false) {
			c.send()
		}
	}
	x.done()
}

// settle stores the captured response or releases the key, by the release
// rule; omitted marks a streamed response whose body is not kept. It
// returns false when a failed transaction commit was answered with 500
// instead of the response.
func (x *run) settle(c *capture, omitted bool) bool {
	e := x.p.e
	x.ev.Status = c.status
	// With a transaction, Commit's own token check decides a lost claim.
	lost := x.lost.Load() && c.tx == nil
	switch {
	case c.status < MinStatus || c.status > MaxStatus || e.cfg.release(c.status):
		// Statuses outside 200..599 (a 101 without a hijack, a 7xx)
		// cannot be replayed: never stored.
		if c.tx != nil {
			x.rollback(c.tx)
		}
		x.ev.Outcome = OutcomeReleased
		x.release()
		return true
	case lost:
		x.ev.Outcome, x.ev.Err = OutcomeExecuted, ErrLeaseLost
		return true
	}
	if err := x.store(c, omitted); err != nil && c.tx != nil {
		x.ev.Outcome, x.ev.Status = OutcomeReleased, problemCommit.status
		e.writeProblem(x.w, problemCommit, "The transaction holding the request's changes and its stored response failed to commit; retry with the same key to learn the outcome.", 0)
		return false
	}
	x.ev.Outcome = OutcomeExecuted
	return true
}

// store completes the record with the captured response (body omitted when
// streaming). With a transaction it commits it; a failed commit rolls back,
// releases the key and returns the error. A Complete that fails for a
// reason other than a lost claim is tried once more.
func (x *run) store(c *capture, omitted bool) error {
	e := x.p.e
	resp := Response{Status: c.status, Header: storedHeader(c.header, x.w.Header(), e.cfg.replayHeader, omitted)}
	if omitted {
		resp.BodyOmitted = true
	} else {
		resp.Body = c.buf.Bytes()
	}
	now := e.cfg.clock()
	ctx := storeContext(x.r.Context(), e.cfg.storeTimeout, true)
	t := time.Now()
	op := StoreComplete
	var err error
	if c.tx != nil {
		op = StoreCommit
		err = c.tx.Commit(ctx, resp, now, now.Add(x.p.retention))
	} else {
		err = e.store.Complete(ctx, x.scope, x.key, x.token, resp, now, now.Add(x.p.retention))
	}
	d := time.Since(t)
	x.ev.Finish += d
	e.observeStore(ctx, op, d, err)
	ctx.release()
	switch {
	case err == nil:
		x.completed = c.tx == nil
	case c.tx != nil:
		// The transaction is gone: nothing to retry.
		x.ev.Err = err
		x.rollback(c.tx)
		x.release()
	default:
		x.ev.Err = err
		if !errors.Is(err, ErrLeaseLost) && e.cfg.completionRetry > 0 {
			// The store blipped: the client gets its response, and the
			// record lands in the background while the claim is kept. A
			// stream's waits for its handler, which may still panic.
			resp.Body = bytes.Clone(resp.Body)
			if omitted {
				x.pending = x.task(taskComplete, resp)
			} else {
				e.bg.add(x.task(taskComplete, resp))
			}
		}
	}
	return err
}

// commitStream decides store or release for a response that starts
// streaming before the handler returned. It returns false when the
// response must be abandoned (a failed commit was answered with 500).
func (x *run) commitStream(c *capture) bool {
	x.stopHeartbeat() // the claim ends here, one way or the other
	ok := x.settle(c, true)
	if ok && c.tx != nil && x.ev.Outcome == OutcomeExecuted {
		c.tx = nil // committed: nothing left to roll back
	}
	return ok
}

// evict deletes the completed record of a stream whose handler panicked,
// when the store can delete.
func (x *run) evict() {
	d, ok := x.p.e.store.(Deleter)
	if !ok {
		x.ev.Err = errors.New("idem: a streamed response's handler panicked after its record was completed, and the store cannot delete it")
		return
	}
	ctx := storeContext(x.r.Context(), x.p.e.cfg.storeTimeout, true)
	defer ctx.release()
	t := time.Now()
	_, err := d.Delete(ctx, x.scope, x.key)
	x.p.e.observeStore(ctx, StoreDelete, time.Since(t), err)
	if err != nil {
		x.ev.Err = err
	}
}

// onHijack releases the claim before the connection is handed over.
func (x *run) onHijack(c *capture) {
	if c.tx != nil {
		x.rollback(c.tx)
		c.tx = nil
	}
	x.release()
}

func (x *run) release() {
	ctx := x.ctx()
	defer ctx.release()
	t := time.Now()
	err := x.p.e.store.Release(ctx, x.scope, x.key, x.token)
	d := time.Since(t)
	x.ev.Finish += d
	x.p.e.observeStore(ctx, StoreRelease, d, err)
	if err != nil && x.ev.Err == nil {
		x.ev.Err = err
	}
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		// Retried in the background within the lease, so a retry runs
		// once the store is back instead of waiting for the lease end.
		x.p.e.bg.add(x.task(taskRelease, Response{}))
	}
}

// releaseLater releases, in the background, a claim whose Claim call
// failed: it may have landed although its answer did not.
func (x *run) releaseLater() { x.p.e.bg.add(x.task(taskRelease, Response{})) }

// task returns a background task for this request's claim.
func (x *run) task(kind taskKind, resp Response) *task {
	return &task{
		kind: kind, scope: x.scope, key: x.key, token: x.token, fingerprint: x.fp,
		resp: resp, retention: x.p.retention, lease: x.lease, leaseEnd: time.Unix(0, x.leaseEnd.Load()),
		ev: x.ev, ctx: context.WithoutCancel(x.r.Context()),
	}
}

// retryAfterSecs returns the Retry-After of a 409 or a 503 in seconds: the
// hint, but no more than left when left is positive, rounded up, at
// least 1.
func (e *Engine) retryAfterSecs(left time.Duration) int {
	d := e.cfg.retryAfter
	if left > 0 {
		d = min(d, left)
	}
	return max(int((d+time.Second-1)/time.Second), 1)
}

// call makes one store call on a context of its own, detached from
// parent's cancellation and bounded by the store timeout, observes it,
// and adds its time to *took.
func (e *Engine) call(parent context.Context, op StoreOp, took *time.Duration, fn func(context.Context) error) error {
	ctx := storeContext(parent, e.cfg.storeTimeout, true)
	t := time.Now()
	err := fn(ctx)
	d := time.Since(t)
	*took += d
	e.observeStore(ctx, op, d, err)
	ctx.release()
	return err
}

func (x *run) rollback(tx Tx) {
	ctx := x.ctx()
	defer ctx.release()
	t := time.Now()
	err := tx.Rollback(ctx)
	x.p.e.observeStore(ctx, StoreRollback, time.Since(t), err)
	if err != nil && x.ev.Err == nil {
		x.ev.Err = err
	}
}

// heartbeat extends the lease while the handler runs, when configured. The
// returned function stops it and waits for it to end.
func (x *run) heartbeat() func() {
	e := x.p.e
	if !e.cfg.beat {
		return func() {}
	}
	// Beat often enough for the lease in effect on this route.
	interval := x.lease / 3
	if e.cfg.heartbeat > 0 {
		interval = min(e.cfg.heartbeat, interval)
	}
	interval = max(interval, time.Millisecond)
	stop := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			now := e.cfg.clock()
			ctx := x.ctx()
			t := time.Now()
			err := e.extender.Extend(ctx, x.scope, x.key, x.token, now, now.Add(x.lease))
			e.observeStore(ctx, StoreExtend, time.Since(t), err)
			ctx.release()
			if err == nil {
				x.leaseEnd.Store(now.Add(x.lease).UnixNano())
			}
			if errors.Is(err, ErrLeaseLost) {
				x.lost.Store(true)
				return
			}
		}
	})
	return func() { once.Do(func() { close(stop); wg.Wait() }) }
}

func (e *Engine) observeStore(ctx context.Context, op StoreOp, d time.Duration, err error) {
	if e.cfg.storeObserver != nil {
		e.cfg.storeObserver(ctx, op, d, err)
	}
}

// replay writes a stored response.
func (e *Engine) replay(w http.ResponseWriter, resp *Response) {
	// The stored values are copied into one new backing array (the store
	// may share them between replays; code after us may edit in place).
	n := 3
	for _, v := range resp.Header {
		n += len(v)
	}
	vals := make([]string, 0, n)
	h := w.Header()
	for k, v := range resp.Header {
		vals = append(vals, v...)
		h[k] = vals[len(vals)-len(v) : len(vals) : len(vals)]
	}
	vals = append(vals, "true")
	h[e.cfg.replayHeader] = vals[len(vals)-1 : len(vals) : len(vals)]
	if resp.BodyOmitted {
		h[HeaderBodyOmitted] = h[e.cfg.replayHeader][:1:1]
	}
	if bodyAllowed(resp.Status) {
		vals = append(vals, strconv.Itoa(len(resp.Body)))
		h["Content-Length"] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 && bodyAllowed(resp.Status) {
		_, _ = w.Write(resp.Body)
	}
}

// nested reports whether w is, or wraps, the writer of a request this
// engine (or another) already protects.
func nested(w http.ResponseWriter) bool { return findCapture(w) != nil }

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// storedHeader returns the handler's headers h as they are stored: without
// Set-Cookie, Date, Content-Length, the replay markers, hop-by-hop headers
// (including those named in Connection), headers that middleware outside
// the engine set and the handler left as they were (they are the current
// request's, such as X-Request-Id), and, when the body is omitted, the
// headers that describe the body. It returns h itself when there is
// nothing to remove.
func storedHeader(h, outer http.Header, replayHeader string, omitted bool) http.Header {
	drop := func(k string) bool {
		switch k {
		case "Set-Cookie", "Date", "Content-Length", "Connection", "Keep-Alive", "Proxy-Connection",
			"Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
			replayHeader, HeaderBodyOmitted:
			return true
		case "Content-Encoding", "Content-Range", "Content-Md5", "Digest", "Content-Digest", "Repr-Digest", "Etag":
			if omitted {
				return true
			}
		}
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
		if ov, ok := outer[k]; ok && slices.Equal(ov, h[k]) {
			return true
		}
		for _, v := range h["Connection"] {
			for f := range strings.SplitSeq(v, ",") {
				if http.CanonicalHeaderKey(strings.TrimSpace(f)) == k {
					return true
				}
			}
		}
		return false
	}
	n := 0
	for k := range h {
		if drop(k) {
			n++
		}
	}
	if n == 0 {
		return h
	}
	out := make(http.Header, len(h)-n)
	for k, v := range h {
		if !drop(k) {
			out[k] = v
		}
	}
	return out
}

var errBodyTooLarge = errors.New("idem: request body too large")

// readBody reads the whole request body, up to limit bytes.
func (x *run) readBody(limit int64) ([]byte, error) {
	r := x.r
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	if r.ContentLength >= 0 {
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, err
		}
		if n, _ := r.Body.Read(x.one[:]); n > 0 {
			return nil, errors.New("idem: request body longer than its Content-Length")
		}
		return b, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errBodyTooLarge
	}
	return b, nil
}

// bodyReader is the request body handed to the handler: the bytes the
// engine read, unchanged.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// hasher is a pooled SHA-256 with scratch space, so fingerprinting a
// request allocates only its result.
type hasher struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
	hex [2 * sha256.Size]byte
}

var hashPool = sync.Pool{New: func() any { return &hasher{h: sha256.New(), buf: make([]byte, 0, 512)} }}

func fingerprintRequest(r *http.Request, body []byte) string {
	hs := hashPool.Get().(*hasher)
	hs.h.Reset()
	u := r.URL
	target := hs.buf[:0]
	if u.Opaque != "" {
		target = append(target, u.RequestURI()...)
	} else {
		target = append(target, u.EscapedPath()...)
		if len(target) == 0 {
			target = append(target, '/')
		}
		if u.ForceQuery || u.RawQuery != "" {
			target = append(target, '?')
			target = append(target, u.RawQuery...)
		}
	}
	hs.buf = target
	b := hs.buf[len(target):]
	b = appendPart(b, r.Method)
	b = strconv.AppendInt(b, int64(len(target)), 10)
	b = append(b, ':')
	hs.h.Write(b)
	hs.h.Write(target)
	b = strconv.AppendInt(b[:0], int64(len(body)), 10)
	b = append(b, ':')
	hs.h.Write(b)
	hs.h.Write(body)
	hex.Encode(hs.hex[:], hs.h.Sum(hs.sum[:0]))
	s := string(hs.hex[:])
	if cap(hs.buf) <= 4096 {
		hashPool.Put(hs)
	}
	return s
}

func newToken() string {
	var b [16]byte
	var h [32]byte
	_, _ = rand.Read(b[:])
	hex.Encode(h[:], b[:])
	return string(h[:])
}

// statusWriter records the status of an unprotected response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush and Hijack keep what the underlying writer can do, for handlers
// that assert http.Flusher or http.Hijacker while running unprotected.
func (s *statusWriter) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(s.ResponseWriter).Hijack()
}
