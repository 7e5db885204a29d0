package idemotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	idem "github.com/idemkit/idem/core"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter the package uses.
const ScopeName = "github.com/idemkit/idem/otel"

// The names of the instruments.
const (
	// MetricRequests is the counter of requests the engine saw, one per
	// request, with the attributes AttrOutcome, AttrMethod and AttrRoute.
	// Unit "{request}".
	MetricRequests = "idempotency.requests"
	// MetricStoreDuration is the histogram of store-call latency in
	// seconds, with the attributes AttrOperation and AttrError.
	MetricStoreDuration = "idempotency.store.duration"
	// MetricWaitDuration is the histogram of the time a request spent
	// waiting for another request with its key, in wait mode
	// (idem.WithWait), in seconds, with the attributes of MetricRequests.
	MetricWaitDuration = "idempotency.wait.duration"
	// MetricBackground is the counter of the engine's background work
	// (idem.Outcome.Background: a completion that landed late, or was
	// lost, expired or dropped; a release that failed), one per task,
	// with the attributes of MetricRequests. Unit "{task}".
	MetricBackground = "idempotency.background"
	// MetricClaimsLost is the counter of store calls that found the
	// request's claim no longer held (they returned idem.ErrLeaseLost): its
	// lease ended and another request took the key over, or the record
	// expired or was deleted. One per such call, with the attribute
	// AttrOperation (the call: "complete", "extend", "release", "commit",
	// "begin_tx", "evict"). A lost "complete" or "commit" is a response
	// the client got but a retry will not replay: it runs the handler
	// again. Unit "{claim}".
	MetricClaimsLost = "idempotency.claims.lost"
)

// The attribute keys.
const (
	// AttrOutcome is the request's idem.Outcome ("executed", "replayed",
	// "conflict", ...).
	AttrOutcome attribute.Key = "outcome"
	// AttrMethod is the request method. The engine reports only requests
	// with a method it protects (idem.WithMethods; POST and PATCH by
	// default), so its values are bounded by configuration.
	AttrMethod attribute.Key = "http.request.method"
	// AttrRoute is the route template the request matched
	// ("/orders/{id}"). It is absent when the engine was given none (an
	// adapter that could not resolve it).
	AttrRoute attribute.Key = "http.route"
	// AttrOperation is the store call (an idem.StoreOp: "claim",
	// "complete", "release", "get", "delete", "extend", "begin_tx",
	// "commit", "rollback", "evict", "now").
	AttrOperation attribute.Key = "operation"
	// AttrError reports whether the store call returned an error.
	AttrError attribute.Key = "error"

	// SpanAttrOutcome is set on the request's span to its outcome.
	SpanAttrOutcome attribute.Key = "idempotency.outcome"
	// SpanAttrKeyHash is set on the request's span to the hash of its key
	// (idem.Event.KeyHash, the same value the engine's logs carry), when
	// the request had a key. The key itself is never recorded.
	SpanAttrKeyHash attribute.Key = "idempotency.key_hash"
)

// The explicit bucket boundaries, in seconds, given to the SDK as advice;
// a View overrides them.
var (
	// A store call: from a tenth of a millisecond (memory) to the default
	// store timeout of two seconds and beyond.
	storeBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// A wait: as long as a handler runs, up to a minute.
	waitBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
)

// maxCachedSets bounds the attribute sets kept per (outcome, method,
// route). Route templates are few; past the bound (a router that reports
// raw paths) the sets are built per request instead of growing the cache.
const maxCachedSets = 1024

// An Option configures New.
type Option func(*config)

type config struct {
	mp   metric.MeterProvider
	next idem.Observer
}

// WithMeterProvider sets the MeterProvider the instruments come from. nil
// means the global one. Default: otel.GetMeterProvider() at the time of
// New (which follows a later otel.SetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithNext sets an Observer that gets every event after it is recorded,
// so that an engine keeps its logs: an engine has one Observer, and the
// Instrumentation's replaces the engine's default slog one. nil means
// none (metrics and span attributes only). Default:
// idem.SlogObserver(nil), the engine's own default, which logs to
// slog.Default(). To log to your logger, pass
// WithNext(idem.SlogObserver(logger)) instead of giving the engine
// idem.WithLogger.
func WithNext(obs idem.Observer) Option {
	return func(c *config) { c.next = obs }
}

// Instrumentation turns the engine's events into OpenTelemetry metrics and
// span attributes. Build it with New, once, and give its Options to
// idem.New. It is safe for concurrent use.
type Instrumentation struct {
	requests metric.Int64Counter
	bg       metric.Int64Counter
	lost     metric.Int64Counter
	store    metric.Float64Histogram
	wait     metric.Float64Histogram
	next     idem.Observer

	sets    sync.Map // reqKey -> *reqSet
	nsets   atomic.Int64
	storeOp map[idem.StoreOp]*storeSet // read-only after New
}

// storeSet is what one store operation records with, built once.
type storeSet struct {
	rec  [2][]metric.RecordOption // [error]
	lost []metric.AddOption
}

type reqKey struct {
	outcome       idem.Outcome
	method, route string
}

// reqSet is what one (outcome, method, route) records with, built once.
type reqSet struct {
	add  []metric.AddOption
	rec  []metric.RecordOption
	span []attribute.KeyValue
}

// New returns an Instrumentation whose instruments come from the
// MeterProvider of WithMeterProvider. It fails only when the provider
// refuses an instrument.
func New(opts ...Option) (*Instrumentation, error) {
	cfg := config{next: idem.SlogObserver(nil)}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	mp := cfg.mp
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	in := &Instrumentation{next: cfg.next}
	var err error
	in.requests, err = m.Int64Counter(MetricRequests,
		metric.WithUnit("{request}"),
		metric.WithDescription("Requests seen by the idempotency engine, by outcome."))
	if err != nil {
		return nil, fmt.Errorf("idemotel: %s: %w", MetricRequests, err)
	}
	in.bg, err = m.Int64Counter(MetricBackground,
		metric.WithUnit("{task}"),
		metric.WithDescription("Background work of the idempotency engine (completions retried after a store failure, releases), by outcome."))
	if err != nil {
		return nil, fmt.Errorf("idemotel: %s: %w", MetricBackground, err)
	}
	in.lost, err = m.Int64Counter(MetricClaimsLost,
		metric.WithUnit("{claim}"),
		metric.WithDescription("Store calls that found the request's claim lost (its lease ended and the key was taken over, or the record is gone), by operation."))
	if err != nil {
		return nil, fmt.Errorf("idemotel: %s: %w", MetricClaimsLost, err)
	}
	in.store, err = m.Float64Histogram(MetricStoreDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of the idempotency store's calls, by operation."),
		metric.WithExplicitBucketBoundaries(storeBuckets...))
	if err != nil {
		return nil, fmt.Errorf("idemotel: %s: %w", MetricStoreDuration, err)
	}
	in.wait, err = m.Float64Histogram(MetricWaitDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Time requests spent waiting for a request with the same idempotency key, in wait mode."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	if err != nil {
		return nil, fmt.Errorf("idemotel: %s: %w", MetricWaitDuration, err)
	}
	ops := []idem.StoreOp{idem.StoreClaim, idem.StoreComplete, idem.StoreRelease, idem.StoreExtend,
		idem.StoreGet, idem.StoreDelete, idem.StoreBeginTx, idem.StoreCommit, idem.StoreRollback,
		idem.StoreEvict, idem.StoreNow}
	in.storeOp = make(map[idem.StoreOp]*storeSet, len(ops))
	for _, op := range ops {
		in.storeOp[op] = newStoreSet(op)
	}
	return in, nil
}

// Options returns the engine options that install the Instrumentation:
// idem.WithObserver(in.Observer()) and
// idem.WithStoreObserver(in.StoreObserver()). An idem.WithObserver or
// idem.WithLogger given to idem.New after them replaces the observer;
// chain it with WithNext instead.
func (in *Instrumentation) Options() []idem.Option {
	return []idem.Option{idem.WithObserver(in.Observer()), idem.WithStoreObserver(in.StoreObserver())}
}

// Observer returns the engine Observer that counts each request in
// MetricRequests (and each background task in MetricBackground), records its wait in MetricWaitDuration, sets
// SpanAttrOutcome and SpanAttrKeyHash on the span in ctx when it is
// recording (it starts no span of its own), records the event's error on
// that span, and then calls the WithNext observer.
func (in *Instrumentation) Observer() idem.Observer { return in.observe }

// StoreObserver returns the engine StoreObserver that records each store
// call's duration in MetricStoreDuration, and counts each call that
// returned idem.ErrLeaseLost in MetricClaimsLost.
func (in *Instrumentation) StoreObserver() idem.StoreObserver { return in.observeStore }

func (in *Instrumentation) observe(ctx context.Context, ev idem.Event) {
	s := in.requestSet(ev.Outcome, ev.Method, ev.Route)
	if ev.Outcome.Background() {
		// After the request: its span has ended.
		in.bg.Add(ctx, 1, s.add...)
		if in.next != nil {
			in.next(ctx, ev)
		}
		return
	}
	in.requests.Add(ctx, 1, s.add...)
	if ev.Waited > 0 {
		in.wait.Record(ctx, ev.Waited.Seconds(), s.rec...)
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(s.span...)
		if h := ev.KeyHash(); h != "" {
			span.SetAttributes(SpanAttrKeyHash.String(h))
		}
		if ev.Err != nil {
			span.RecordError(ev.Err)
		}
	}
	if in.next != nil {
		in.next(ctx, ev)
	}
}

func (in *Instrumentation) observeStore(ctx context.Context, op idem.StoreOp, d time.Duration, err error) {
	failed := 0
	if err != nil {
		failed = 1
	}
	set, ok := in.storeOp[op]
	if !ok {
		set = newStoreSet(op)
	}
	in.store.Record(ctx, d.Seconds(), set.rec[failed]...)
	if failed == 1 && errors.Is(err, idem.ErrLeaseLost) {
		in.lost.Add(ctx, 1, set.lost...)
	}
}

// newStoreSet builds the options of one store operation.
func newStoreSet(op idem.StoreOp) *storeSet {
	rec := func(failed bool) []metric.RecordOption {
		set := attribute.NewSet(AttrOperation.String(string(op)), AttrError.Bool(failed))
		return []metric.RecordOption{metric.WithAttributeSet(set)}
	}
	lost := metric.WithAttributeSet(attribute.NewSet(AttrOperation.String(string(op))))
	return &storeSet{rec: [2][]metric.RecordOption{rec(false), rec(true)}, lost: []metric.AddOption{lost}}
}

// requestSet returns the cached options for one (outcome, method, route),
// building them the first time.
func (in *Instrumentation) requestSet(o idem.Outcome, method, route string) *reqSet {
	k := reqKey{outcome: o, method: method, route: route}
	if v, ok := in.sets.Load(k); ok {
		return v.(*reqSet)
	}
	kvs := make([]attribute.KeyValue, 0, 3)
	kvs = append(kvs, AttrOutcome.String(string(o)), AttrMethod.String(method))
	if route != "" {
		kvs = append(kvs, AttrRoute.String(route))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kvs...))
	s := &reqSet{
		add:  []metric.AddOption{opt},
		rec:  []metric.RecordOption{opt},
		span: []attribute.KeyValue{SpanAttrOutcome.String(string(o))},
	}
	if in.nsets.Load() >= maxCachedSets {
		return s
	}
	if v, loaded := in.sets.LoadOrStore(k, s); loaded {
		return v.(*reqSet)
	}
	in.nsets.Add(1)
	return s
}
