package idem

import (
	"net/http"
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
	beats    beats
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
	e.beats.e = e
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
