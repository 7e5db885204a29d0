package idemotel_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	idemotel "github.com/idemkit/idem/otel"
	memstore "github.com/idemkit/idem/stores/memory"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// rig is the fixture routes behind an engine instrumented with a real SDK
// whose metrics and spans stay in memory.
type rig struct {
	t      *testing.T
	h      http.Handler
	f      *conformance.Fixture
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tracer trace.Tracer
}

func newRig(t *testing.T, wrap func(idem.Store) idem.Store, opts ...idem.Option) *rig {
	t.Helper()
	return newHTTPRig(t, wrap, nil, opts...)
}

// newHTTPRig is newRig with the middleware's HTTP options.
func newHTTPRig(t *testing.T, wrap func(idem.Store) idem.Store, httpOpts []idem.HTTPOption, opts ...idem.Option) *rig {
	t.Helper()
	r := &rig{t: t, f: conformance.NewFixture(httpOpts...), reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	r.tracer = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans)).Tracer("test")
	inst, err := idemotel.New(idemotel.WithMeterProvider(mp), idemotel.WithNext(nil))
	if err != nil {
		t.Fatal(err)
	}
	ms := memstore.New(memstore.WithSweepInterval(0))
	var store idem.Store = ms
	if wrap != nil {
		store = wrap(ms)
	}
	e, err := idem.New(store, append(inst.Options(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	r.h = r.f.ServeMux(e.Middleware)
	return r
}

// do sends one request inside a server span and checks its status.
func (r *rig) do(method, target, key, body string, want int) {
	r.t.Helper()
	ctx, span := r.tracer.Start(r.t.Context(), "server", trace.WithSpanKind(trace.SpanKindServer))
	req := httptest.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	r.h.ServeHTTP(w, req)
	span.End()
	if w.Code != want {
		r.t.Errorf("%s %s: status %d, want %d; body %q", method, target, w.Code, want, w.Body)
	}
}

// twice sends a request in the background and, once its handler is
// running, the same request again.
func (r *rig) twice(target, key string, first, second int) {
	r.t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() { r.do(http.MethodPost, target, key, "", first) })
	synctest.Wait() // the first request sleeps in its handler
	if r.f.Count() != 1 {
		r.t.Fatalf("the first request's handler is not running (count %d)", r.f.Count())
	}
	r.do(http.MethodPost, target, key, "", second)
	wg.Wait()
}

type point struct{ outcome, method, route string }

type storePoint struct {
	op     string
	failed bool
}

func (r *rig) collect() metricdata.ResourceMetrics {
	r.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		r.t.Fatal(err)
	}
	return rm
}

func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				if sm.Scope.Name != idemotel.ScopeName {
					panic("scope " + sm.Scope.Name)
				}
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

func str(s attribute.Set, k attribute.Key) string {
	v, _ := s.Value(k)
	return v.AsString()
}

func requestPoint(s attribute.Set) point {
	return point{str(s, idemotel.AttrOutcome), str(s, idemotel.AttrMethod), str(s, idemotel.AttrRoute)}
}

// requests returns every data point of the request counter.
func requests(t *testing.T, rm metricdata.ResourceMetrics) map[point]int64 {
	t.Helper()
	got := map[point]int64{}
	m, ok := find(rm, idemotel.MetricRequests)
	if !ok {
		return got
	}
	if m.Unit != "{request}" {
		t.Errorf("unit %q", m.Unit)
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok || !sum.IsMonotonic {
		t.Fatalf("%s is %T, want a monotonic Sum[int64]", m.Name, m.Data)
	}
	for _, dp := range sum.DataPoints {
		if dp.Attributes.Len() != 3 && !(dp.Attributes.Len() == 2 && !dp.Attributes.HasValue(idemotel.AttrRoute)) {
			t.Errorf("unexpected attributes %v", dp.Attributes.ToSlice())
		}
		got[requestPoint(dp.Attributes)] += dp.Value
	}
	return got
}

// histogram returns the data points of a float64 histogram by attributes.
func histogram(t *testing.T, rm metricdata.ResourceMetrics, name string) []metricdata.HistogramDataPoint[float64] {
	t.Helper()
	m, ok := find(rm, name)
	if !ok {
		return nil
	}
	if m.Unit != "s" {
		t.Errorf("%s: unit %q", name, m.Unit)
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is %T", name, m.Data)
	}
	return h.DataPoints
}

// spanOutcomes returns the idempotency.outcome of every ended span, sorted;
// a span without one counts as "".
func (r *rig) spanOutcomes() []string {
	var out []string
	for _, s := range r.spans.Ended() {
		o := ""
		for _, a := range s.Attributes() {
			if a.Key == idemotel.SpanAttrOutcome {
				o = a.Value.AsString()
			}
		}
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

var errDown = errors.New("store down")

// downStore fails every claim.
type downStore struct{ idem.Store }

func (downStore) Claim(context.Context, store.Claim) (store.ClaimResult, error) {
	return store.ClaimResult{}, errDown
}

// TestOutcomes drives every outcome the fixture routes can produce through
// the engine and checks the counter, the span attribute, and the store
// and wait histograms.
func TestOutcomes(t *testing.T) {
	const (
		post, get = http.MethodPost, http.MethodGet
		long      = "k-" // + 254 characters: over the 255 limit
	)
	tests := []struct {
		name  string
		opts  []idem.Option
		http  []idem.HTTPOption
		store func(idem.Store) idem.Store
		run   func(r *rig)
		want  map[point]int64 // every data point of idempotency.requests
		// requests the engine does not see (GET): their spans carry no
		// outcome
		unseen int
		// data points the store histogram must have
		stores []storePoint
		// data points of the wait histogram, with their sum in seconds
		waits map[point]float64
	}{{
		name:   "executed",
		run:    func(r *rig) { r.do(post, "/echo", "k1", "a", 201) },
		want:   map[point]int64{{"executed", post, "/echo"}: 1},
		stores: []storePoint{{"claim", false}, {"complete", false}},
	}, {
		name: "replayed",
		run: func(r *rig) {
			r.do(post, "/items/7", "k1", "", 201)
			r.do(post, "/items/7", "k1", "", 201)
			r.do(post, "/items/7", "k1", "", 201)
		},
		want: map[point]int64{{"executed", post, "/items/{id}"}: 1, {"replayed", post, "/items/{id}"}: 2},
	}, {
		name:  "replayed after wait",
		opts:  []idem.Option{idem.WithWait(5 * time.Second)},
		run:   func(r *rig) { r.twice("/slow?ms=200", "k1", 200, 200) },
		want:  map[point]int64{{"executed", post, "/slow"}: 1, {"replayed_after_wait", post, "/slow"}: 1},
		waits: map[point]float64{{"replayed_after_wait", post, "/slow"}: 0.2},
	}, {
		name: "released on 500",
		run: func(r *rig) {
			r.do(post, "/status/500", "k1", "", 500)
			r.do(post, "/status/500", "k1", "", 500) // released: runs again
		},
		want:   map[point]int64{{"released", post, "/status/{code}"}: 2},
		stores: []storePoint{{"claim", false}, {"release", false}},
	}, {
		name:   "released on panic",
		run:    func(r *rig) { r.do(post, "/panic", "k1", "", 500) },
		want:   map[point]int64{{"released", post, "/panic"}: 1},
		stores: []storePoint{{"claim", false}, {"release", false}},
	}, {
		name: "conflict",
		run:  func(r *rig) { r.twice("/slow?ms=200", "k1", 200, 409) },
		want: map[point]int64{{"executed", post, "/slow"}: 1, {"conflict", post, "/slow"}: 1},
	}, {
		name:  "wait timeout",
		opts:  []idem.Option{idem.WithWait(50 * time.Millisecond)},
		run:   func(r *rig) { r.twice("/slow?ms=500", "k1", 200, 409) },
		want:  map[point]int64{{"executed", post, "/slow"}: 1, {"wait_timeout", post, "/slow"}: 1},
		waits: map[point]float64{{"wait_timeout", post, "/slow"}: 0.05},
	}, {
		name: "fingerprint mismatch",
		run: func(r *rig) {
			r.do(post, "/echo", "k1", "a", 201)
			r.do(post, "/echo", "k1", "b", 422)
		},
		want: map[point]int64{{"executed", post, "/echo"}: 1, {"fingerprint_mismatch", post, "/echo"}: 1},
	}, {
		name: "missing key",
		run:  func(r *rig) { r.do(http.MethodPatch, "/echo", "", "a", 400) },
		want: map[point]int64{{"missing_key", http.MethodPatch, "/echo"}: 1},
	}, {
		name: "invalid key",
		run: func(r *rig) {
			r.do(post, "/echo", long+strings.Repeat("x", 254), "a", 400)
			r.do(post, "/echo", "a b", "a", 400)
		},
		want: map[point]int64{{"invalid_key", post, "/echo"}: 2},
	}, {
		name: "body too large",
		http: []idem.HTTPOption{idem.WithMaxRequestBody(8)},
		run:  func(r *rig) { r.do(post, "/echo", "k1", strings.Repeat("x", 100), 413) },
		want: map[point]int64{{"body_too_large", post, "/echo"}: 1},
	}, {
		name:   "store failure",
		store:  func(s idem.Store) idem.Store { return downStore{s} },
		run:    func(r *rig) { r.do(post, "/echo", "k1", "a", 503) },
		want:   map[point]int64{{"store_failure", post, "/echo"}: 1},
		stores: []storePoint{{"claim", true}},
	}, {
		name:  "store failure, fail open",
		opts:  []idem.Option{idem.WithFailOpen()},
		store: func(s idem.Store) idem.Store { return downStore{s} },
		run:   func(r *rig) { r.do(post, "/echo", "k1", "a", 201) },
		want:  map[point]int64{{"store_failure", post, "/echo"}: 1},
	}, {
		name: "skipped",
		run:  func(r *rig) { r.do(post, "/optional", "", "", 201) },
		want: map[point]int64{{"skipped", post, "/optional"}: 1},
	}, {
		name: "unprotected method",
		run: func(r *rig) {
			r.do(get, "/counter", "", "", 200)
			r.do(get, "/counter", "k1", "", 200)
		},
		want:   map[point]int64{},
		unseen: 2,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newHTTPRig(t, tt.store, tt.http, tt.opts...)
				tt.run(r)
				rm := r.collect()

				got := requests(t, rm)
				if !mapsEqual(got, tt.want) {
					t.Errorf("%s:\n got %v\nwant %v", idemotel.MetricRequests, got, tt.want)
				}
				wantSpans := make([]string, tt.unseen)
				for p, n := range tt.want {
					for range n {
						wantSpans = append(wantSpans, p.outcome)
					}
				}
				slices.Sort(wantSpans)
				if gotSpans := r.spanOutcomes(); !slices.Equal(gotSpans, wantSpans) {
					t.Errorf("span %s:\n got %q\nwant %q", idemotel.SpanAttrOutcome, gotSpans, wantSpans)
				}

				stores := map[storePoint]uint64{}
				for _, dp := range histogram(t, rm, idemotel.MetricStoreDuration) {
					failed, _ := dp.Attributes.Value(idemotel.AttrError)
					stores[storePoint{str(dp.Attributes, idemotel.AttrOperation), failed.AsBool()}] += dp.Count
				}
				for _, sp := range tt.stores {
					if stores[sp] == 0 {
						t.Errorf("%s: no data point for %+v; have %v", idemotel.MetricStoreDuration, sp, stores)
					}
				}

				waits := map[point]float64{}
				for _, dp := range histogram(t, rm, idemotel.MetricWaitDuration) {
					waits[requestPoint(dp.Attributes)] += dp.Sum
				}
				if len(waits) != len(tt.waits) {
					t.Errorf("%s: got %v, want %v", idemotel.MetricWaitDuration, waits, tt.waits)
				}
				for p, want := range tt.waits {
					if got, ok := waits[p]; !ok || math.Abs(got-want) > 1e-9 {
						t.Errorf("%s %v: sum %v (present %v), want %v", idemotel.MetricWaitDuration, p, got, ok, want)
					}
				}
			})
		})
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestSpanDetails checks the key hash and the recorded error on the span.
func TestSpanDetails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, func(s idem.Store) idem.Store { return downStore{s} })
		r.do(http.MethodPost, "/echo", "k1", "a", 503)
		spans := r.spans.Ended()
		if len(spans) != 1 {
			t.Fatalf("%d spans, want 1", len(spans))
		}
		s := spans[0]
		if s.Name() != "server" {
			t.Errorf("span %q: the package must not start spans", s.Name())
		}
		attrs := attribute.NewSet(s.Attributes()...)
		if h := str(attrs, idemotel.SpanAttrKeyHash); len(h) != 16 || strings.Contains(h, "k1") {
			t.Errorf("key hash %q", h)
		}
		var recorded bool
		for _, ev := range s.Events() {
			if ev.Name == "exception" && strings.Contains(fmt.Sprint(ev.Attributes), errDown.Error()) {
				recorded = true
			}
		}
		if !recorded {
			t.Errorf("the store error is not recorded on the span: %v", s.Events())
		}
	})
}

// TestNoSpan checks that a request without a span (or with one that is
// not recording) is still counted.
func TestNoSpan(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	inst, err := idemotel.New(idemotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), idemotel.WithNext(nil))
	if err != nil {
		t.Fatal(err)
	}
	obs := inst.Observer()
	ev := idem.Event{Outcome: idem.OutcomeExecuted, Method: "POST", Route: "/a"}
	obs(t.Context(), ev)
	notRecording := trace.ContextWithSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1},
	}))
	obs(notRecording, ev)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	if got := requests(t, rm); got[point{"executed", "POST", "/a"}] != 2 || len(got) != 1 {
		t.Errorf("got %v", got)
	}
}

// TestAttributes checks the attributes of custom methods and empty
// routes, and the cache past its bound.
func TestAttributes(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	inst, err := idemotel.New(idemotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))), idemotel.WithNext(nil))
	if err != nil {
		t.Fatal(err)
	}
	obs := inst.Observer()
	obs(t.Context(), idem.Event{Outcome: idem.OutcomeSkipped, Method: "PURGE"})
	const routes = 1500 // past the cache's bound, under the SDK's cardinality limit
	for i := range 2 * routes {
		obs(t.Context(), idem.Event{Outcome: idem.OutcomeExecuted, Method: "POST", Route: fmt.Sprintf("/r/%d", i%routes)})
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := requests(t, rm) // checks that a point without a route has no http.route
	if p := (point{"skipped", "PURGE", ""}); got[p] != 1 {
		t.Errorf("%v: %d, want 1", p, got[p])
	}
	for i := range routes {
		if p := (point{"executed", "POST", fmt.Sprintf("/r/%d", i)}); got[p] != 2 {
			t.Fatalf("%v: %d, want 2", p, got[p])
		}
	}
	if len(got) != routes+1 {
		t.Errorf("%d data points, want %d", len(got), routes+1)
	}
}

// TestBuckets checks that the SDK takes the advised bucket boundaries.
func TestBuckets(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	inst, err := idemotel.New(idemotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	inst.StoreObserver()(t.Context(), idem.StoreClaim, 300*time.Microsecond, nil)
	inst.StoreObserver()(t.Context(), idem.StoreOp("custom"), time.Second, errDown)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	dps := histogram(t, rm, idemotel.MetricStoreDuration)
	if len(dps) != 2 {
		t.Fatalf("%d data points, want 2", len(dps))
	}
	for _, dp := range dps {
		if dp.Bounds[0] != 0.0001 || dp.Bounds[len(dp.Bounds)-1] != 10 {
			t.Errorf("bounds %v", dp.Bounds)
		}
		op, hasErr := str(dp.Attributes, idemotel.AttrOperation), dp.Attributes.HasValue(idemotel.AttrError)
		switch op {
		case "claim":
			if v, _ := dp.Attributes.Value(idemotel.AttrError); v.AsBool() || !hasErr || dp.Sum != 0.0003 {
				t.Errorf("claim: %v sum %v", dp.Attributes.ToSlice(), dp.Sum)
			}
		case "custom":
			if v, _ := dp.Attributes.Value(idemotel.AttrError); !v.AsBool() || dp.Sum != 1 {
				t.Errorf("custom: %v sum %v", dp.Attributes.ToSlice(), dp.Sum)
			}
		default:
			t.Errorf("operation %q", op)
		}
	}
}

// TestNext checks that events reach the next observer: slog.Default()
// unless set, the given one, or none.
func TestNext(t *testing.T) {
	ev := idem.Event{Outcome: idem.OutcomeConflict, Method: "POST", Route: "/a", Status: 409}
	mp := sdkmetric.NewMeterProvider()

	t.Run("default", func(t *testing.T) {
		var buf bytes.Buffer
		old := slog.Default()
		slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
		t.Cleanup(func() { slog.SetDefault(old) })
		inst, err := idemotel.New(idemotel.WithMeterProvider(mp))
		if err != nil {
			t.Fatal(err)
		}
		inst.Observer()(t.Context(), ev)
		if !strings.Contains(buf.String(), "outcome=conflict") {
			t.Errorf("slog.Default() got %q", buf.String())
		}
	})
	t.Run("set", func(t *testing.T) {
		var got []idem.Event
		inst, err := idemotel.New(idemotel.WithMeterProvider(mp), idemotel.WithNext(func(_ context.Context, ev idem.Event) { got = append(got, ev) }))
		if err != nil {
			t.Fatal(err)
		}
		inst.Observer()(t.Context(), ev)
		if len(got) != 1 || got[0].Outcome != idem.OutcomeConflict {
			t.Errorf("next got %v", got)
		}
	})
	t.Run("none", func(t *testing.T) {
		inst, err := idemotel.New(nil, idemotel.WithMeterProvider(nil), idemotel.WithNext(nil))
		if err != nil {
			t.Fatal(err)
		}
		inst.Observer()(t.Context(), ev) // the global no-op provider; nothing to call next
		if len(inst.Options()) != 2 {
			t.Errorf("Options: %d", len(inst.Options()))
		}
	})
}

// failOnce fails its first Complete, as a store that blips.
type failOnce struct {
	idem.Store
	failed bool
}

func (s *failOnce) Complete(ctx context.Context, h store.Hold, c store.Completion) error {
	if !s.failed {
		s.failed = true
		return errDown
	}
	return s.Store.Complete(ctx, h, c)
}

// TestBackground counts a completion that landed after a store blip in
// MetricBackground, apart from the requests.
func TestBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, func(s idem.Store) idem.Store { return &failOnce{Store: s} })
		r.do(http.MethodPost, "/echo", "k", "x", 201)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		r.do(http.MethodPost, "/echo", "k", "x", 201) // the replay
		rm := r.collect()
		want := map[point]int64{
			{"executed", "POST", "/echo"}: 1,
			{"replayed", "POST", "/echo"}: 1,
		}
		if got := requests(t, rm); !maps.Equal(got, want) {
			t.Errorf("requests %v, want %v", got, want)
		}
		m, ok := find(rm, idemotel.MetricBackground)
		if !ok {
			t.Fatalf("no %s", idemotel.MetricBackground)
		}
		sum, ok := m.Data.(metricdata.Sum[int64])
		if !ok || len(sum.DataPoints) != 1 || sum.DataPoints[0].Value != 1 || m.Unit != "{task}" {
			t.Fatalf("%s: %+v", idemotel.MetricBackground, m)
		}
		if p := requestPoint(sum.DataPoints[0].Attributes); p != (point{"completed_late", "POST", "/echo"}) {
			t.Errorf("background point %v", p)
		}
		if got := r.spanOutcomes(); !slices.Equal(got, []string{"executed", "replayed"}) {
			t.Errorf("span outcomes %v", got)
		}
	})
}
