package idem

import (
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/idemkit/idem/core/store"
)

// Engine applies the idempotency policy to requests. It is safe for
// concurrent use; build one per store with New and share it.
type Engine struct {
	cfg      config
	store    Store
	notifier store.Notifier
	extender store.Extender
	batch    store.BatchExtender // the heartbeat's, when the store has it
	txb      store.TxBeginner
	txc      store.TxClaimer // claims inside the transaction, when txb has it
	def      *Policy
	bg       *background
	beats    beats
	sclock   *storeClock  // nil when the store has no Clock
	local    localFlights // the keys this engine's requests hold (local.go)
	cache    *replayCache // WithReplayCache; nil when off (cache.go)
}

// New returns an Engine that keeps its records in store. Every option
// documents its default. It returns an error wrapping ErrBadOption when an
// option's value is invalid.
func New(s Store, opts ...Option) (*Engine, error) {
	if isNil(s) {
		return nil, badOption("the store is nil (%T); pass a store its package's New returned", s)
	}
	e := &Engine{cfg: defaultConfig(), store: s}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&e.cfg); err != nil {
			return nil, err
		}
	}
	e.notifier, _ = s.(store.Notifier)
	e.extender, _ = s.(store.Extender)
	e.batch, _ = s.(store.BatchExtender)
	e.txb, _ = s.(store.TxBeginner)
	if e.txb != nil {
		e.txc, _ = s.(store.TxClaimer)
	}
	c := &e.cfg
	switch {
	case !c.beatSet:
		c.beat = e.extender != nil
	case c.beat && e.extender == nil:
		return nil, badOption("heartbeat needs a store that implements store.Extender; %T does not", s)
	}
	leaseSet := c.lease != 0
	if !leaseSet {
		c.lease = DefaultLeaseNoBeat
		if c.beat {
			c.lease = DefaultLease
		}
	}
	if c.lease > c.retention {
		if leaseSet {
			return nil, badOption("lease %v is longer than the retention %v: a claim would outlive the response it keeps; use a lease of at most %v or a longer retention", c.lease, c.retention, c.retention)
		}
		c.lease = c.retention
	}
	if c.heartbeat > 0 && c.heartbeat >= c.lease {
		return nil, badOption("heartbeat interval %v must be shorter than the lease %v", c.heartbeat, c.lease)
	}
	if fb, ok := s.(store.FailoverBound); ok {
		if err := c.outlast(fb.FailoverTime(), leaseSet); err != nil {
			return nil, err
		}
		if c.lease > c.retention {
			return nil, badOption("retention %v is shorter than the lease %v a failover of the store needs (%v): use a retention of at least %v", c.retention, c.lease, fb.FailoverTime(), c.lease)
		}
	}
	if clk, ok := s.(store.Clock); ok {
		e.sclock = &storeClock{src: clk}
	}
	e.cache = newReplayCache(c.cacheBytes, c.cacheTTL)
	e.bg = newBackground(e)
	e.beats.e = e
	e.def = e.Policy()
	return e, nil
}

// Lease returns the lease the engine gives claims, its default resolved
// for the store (see WithLease); a route's lease is at most its retention.
func (e *Engine) Lease() time.Duration { return e.cfg.lease }

// Store returns the engine's store.
func (e *Engine) Store() Store { return e.store }

// Policy is the engine's policy for the routes one middleware protects:
// its HTTPOptions and per-route overrides, built once where a route or
// group is declared and used for each of its requests.
type Policy struct {
	e         *Engine
	h         *httpConfig // shared with the compiled overrides
	required  bool
	skip      bool
	retention time.Duration
	overrides map[routeKey][]RouteOption
	compiled  map[routeKey]*Policy // overrides applied on top of this policy
}

// Policy returns the engine's policy with opts applied, for adapters and
// transports that serve requests themselves (Serve, Start). It panics
// with an error wrapping ErrBadOption when opts contradict each other
// (WithFingerprint and WithJSONFingerprint).
func (e *Engine) Policy(opts ...HTTPOption) *Policy {
	h := defaultHTTP
	p := &Policy{e: e, h: &h, required: true, retention: e.cfg.retention}
	for _, o := range opts {
		if o != nil {
			o.applyHTTP(p)
		}
	}
	if h.fingerprint != nil && h.jsonFP != nil {
		panic(badOption("WithFingerprint and WithJSONFingerprint both given; choose one"))
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

// KeyHeader returns the request header that carries the key
// (WithKeyHeader).
func (p *Policy) KeyHeader() string { return p.h.keyHeader }

// Protects reports whether the policy handles requests with this method
// (WithMethods).
func (p *Policy) Protects(method string) bool {
	for _, m := range p.h.methods {
		if m == method {
			return true
		}
	}
	return false
}

// Route is what a policy decides for one route or operation, for
// transports that run the lifecycle themselves (Start): whether it is
// protected at all, whether a call must carry a key, and how long its
// result is replayed. An HTTP transport also asks Policy.Protects for the
// method.
type Route struct {
	Skip      bool // marked Skip: calls run unprotected
	Required  bool // a call without a key is refused (400), not run unprotected
	Retention time.Duration
}

// Route returns p's decision for method and route (a route template, or
// a gRPC full method), with any ForRoute override for the pair applied.
// RouteFunc has no effect here: the transport names the route.
func (p *Policy) Route(method, route string) Route {
	if q, ok := p.compiled[routeKey{strings.ToUpper(method), route}]; ok {
		p = q
	}
	return Route{Skip: p.skip, Required: p.required, Retention: p.retention}
}

// Route returns what opts decide for method and route, for transports
// that are not HTTP (a gRPC interceptor: Kind "grpc", the full method):
// whether the operation is protected, whether it needs a key, how long
// its result is kept.
func (e *Engine) Route(method, route string, opts ...RouteOption) Route {
	hs := make([]HTTPOption, len(opts))
	for i, o := range opts {
		hs[i] = o
	}
	return e.Policy(hs...).Route(method, route)
}

// Serve runs next for r under the engine's default policy; see
// Policy.Serve.
func (e *Engine) Serve(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	e.def.Serve(w, r, route, next)
}

// outlast makes the lease and the completion retry outlast a failover of
// the store that takes up to d: a claim must still be held when the store
// is back, so that a completion retried in the background lands and a
// retry replays instead of running again. A default is raised to fit; a
// value the user set that cannot is refused.
//
// The failover may begin just before a flight's beat is due, an interval
// after the last extension landed; once the store is back the next beat
// comes within half an interval (a failed beat is tried again at the next
// tick) and takes up to the store timeout. So two intervals, the failover
// and the store timeout must fit in the lease: beatEvery picks an
// interval that does, unless WithHeartbeat set one.
func (c *config) outlast(d time.Duration, leaseSet bool) error {
	if d <= 0 {
		return nil
	}
	c.failover = d
	if need := needLease(d, c.storeTimeout, c.heartbeat, c.beat); c.lease < need {
		if leaseSet {
			return badOption("lease %v cannot outlast a failover of the store, which may take %v: a claim would expire while the store is away and its retry run again; use a lease of at least %v, or make the store fail over faster", c.lease, d, need)
		}
		c.lease = need
	}
	if c.completionRetry > 0 && c.completionRetry < d+c.lease {
		if c.completionRetrySet {
			return badOption("completion retry %v cannot outlast a failover of the store, which may take %v, and the lease %v: use at least %v", c.completionRetry, d, c.lease, d+c.lease)
		}
		c.completionRetry = d + c.lease
	}
	return nil
}

// minBeat is the shortest interval beatEvery derives for a failover.
const minBeat = 100 * time.Millisecond

// needLease returns the shortest lease, in whole seconds, that outlasts a
// failover of d (see outlast): without a heartbeat, d; with an interval
// set, two of them, d and the store timeout; otherwise half as long again
// as d, and long enough that the derived interval is at least a tenth of
// the lease (a quarter more than d and the store timeout).
func needLease(d, storeTimeout, heartbeat time.Duration, beat bool) time.Duration {
	var l time.Duration
	switch {
	case !beat:
		l = d
	case heartbeat > 0:
		l = 2*heartbeat + d + storeTimeout
	default:
		l = max(d+d/2, (d+storeTimeout)*5/4, d+storeTimeout+2*minBeat)
	}
	return (l + time.Second - 1).Truncate(time.Second)
}

// isNil reports whether store is nil or a nil pointer, map, slice,
// channel or func: a typed nil would panic on the first request.
func isNil(s Store) bool {
	if s == nil {
		return true
	}
	switch v := reflect.ValueOf(s); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return v.IsNil()
	}
	return false
}
