package idemotel_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	idemotel "github.com/idemkit/idem/otel"
	memstore "github.com/idemkit/idem/stores/memory"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func benchProvider() *sdkmetric.MeterProvider {
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
}

// BenchmarkObserver measures the Observer on a real SDK, next to a counter
// given its attributes on each call (what the cache avoids).
func BenchmarkObserver(b *testing.B) {
	ev := idem.Event{Outcome: idem.OutcomeReplayed, Method: http.MethodPost, Route: "/orders/{id}", Status: 201}
	mp := benchProvider()
	inst, err := idemotel.New(idemotel.WithMeterProvider(mp), idemotel.WithNext(nil))
	if err != nil {
		b.Fatal(err)
	}
	obs := inst.Observer()
	b.Run("no span", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			obs(ctx, ev)
		}
	})
	b.Run("recording span", func(b *testing.B) {
		ctx, span := sdktrace.NewTracerProvider().Tracer("bench").Start(context.Background(), "server")
		defer span.End()
		b.ReportAllocs()
		for b.Loop() {
			obs(ctx, ev)
		}
	})
	b.Run("baseline: attributes per call", func(b *testing.B) {
		c, err := mp.Meter("baseline").Int64Counter("requests")
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			c.Add(ctx, 1, metric.WithAttributes(
				attribute.String("outcome", string(ev.Outcome)),
				attribute.String("http.request.method", ev.Method),
				attribute.String("http.route", ev.Route)))
		}
	})
}

// BenchmarkStoreObserver measures the StoreObserver on a real SDK.
func BenchmarkStoreObserver(b *testing.B) {
	inst, err := idemotel.New(idemotel.WithMeterProvider(benchProvider()), idemotel.WithNext(nil))
	if err != nil {
		b.Fatal(err)
	}
	obs := inst.StoreObserver()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		obs(ctx, idem.StoreClaim, 150*time.Microsecond, nil)
	}
}

// BenchmarkReplay measures a replayed request on memstore through the
// net/http middleware, with the engine's slog observer (discarding) and
// with the Instrumentation in front of it.
func BenchmarkReplay(b *testing.B) {
	discard := idem.SlogObserver(slog.New(slog.DiscardHandler))
	for _, bc := range []struct {
		name string
		opts func(b *testing.B) []idem.Option
	}{
		{"slog only", func(*testing.B) []idem.Option { return []idem.Option{idem.WithObserver(discard)} }},
		{"instrumented", func(b *testing.B) []idem.Option {
			inst, err := idemotel.New(idemotel.WithMeterProvider(benchProvider()), idemotel.WithNext(discard))
			if err != nil {
				b.Fatal(err)
			}
			return inst.Options()
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := memstore.New()
			b.Cleanup(func() { s.Close() })
			e, err := idem.New(s, bc.opts(b)...)
			if err != nil {
				b.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.HandleFunc("POST /orders", func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte(`{"id":1}`))
			})
			h := e.Middleware()(mux)
			req := httptest.NewRequest(http.MethodPost, "/orders", nil)
			req.Header.Set("Idempotency-Key", "k1")
			w := &discardWriter{h: http.Header{}}
			h.ServeHTTP(w, req)
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, req)
			}
		})
	}
}

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
