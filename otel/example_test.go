package idemotel_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"

	idem "github.com/idemkit/idem/core"
	idemotel "github.com/idemkit/idem/otel"
	memstore "github.com/idemkit/idem/stores/memory"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// An engine whose requests are counted by outcome. A real application
// gives the SDK an exporter (a Prometheus or OTLP reader) instead of the
// manual reader, or leaves out WithMeterProvider to use the global
// provider.
func Example() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	logger := slog.New(slog.DiscardHandler) // your logger
	inst, err := idemotel.New(
		idemotel.WithMeterProvider(provider),
		idemotel.WithNext(idem.SlogObserver(logger)), // keep the engine's logs
	)
	if err != nil {
		log.Fatal(err)
	}
	store := memstore.New()
	defer store.Close()
	engine, err := idem.New(store, inst.Options()...)
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":1}`)
	})
	handler := engine.Middleware()(mux)

	// A request and two retries.
	for range 3 {
		req := httptest.NewRequest(http.MethodPost, "/orders", nil)
		req.Header.Set("Idempotency-Key", "order-1")
		handler.ServeHTTP(httptest.NewRecorder(), req)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != idemotel.MetricRequests {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				outcome, _ := dp.Attributes.Value(idemotel.AttrOutcome)
				route, _ := dp.Attributes.Value(idemotel.AttrRoute)
				fmt.Println(outcome.AsString(), route.AsString(), dp.Value)
			}
		}
	}
	// Unordered output:
	// executed /orders 1
	// replayed /orders 2
}
