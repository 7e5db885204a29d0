// Command chi serves the orders API on Chi, with idem's middleware mounted
// once at the top of the router.
//
//	go run ./examples/chi                # memory store, 127.0.0.1:8080
//	go run ./examples/chi -store postgres
//	go run ./examples/chi -metrics       # Prometheus metrics on GET /metrics
//	go run ./examples/chi -admin-token s3cret  # idem's admin handler on /admin/idem
package main

import (
	"context"
	"crypto/subtle"
	"flag"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	idemchi "github.com/idemkit/idem/adapters/chi"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/examples/internal/app"
	"github.com/idemkit/idem/examples/internal/orders"
	idemotel "github.com/idemkit/idem/otel"
)

func main() {
	var metrics bool
	var adminToken string
	flags := app.ParseOrders("chi", func(fs *flag.FlagSet) {
		fs.BoolVar(&metrics, "metrics", false, "serve Prometheus metrics on GET /metrics")
		fs.StringVar(&adminToken, "admin-token", "", "serve idem's admin handler on /admin/idem to requests with \"Authorization: Bearer TOKEN\" (default: off)")
	})
	ctx := context.Background()
	store, closeStore := flags.Store.MustOpen(ctx)
	defer closeStore()

	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	opts := []idem.Option{app.LogEach()}
	var metricsHandler http.Handler
	if metrics {
		registry := prometheus.NewRegistry()
		exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
		if err != nil {
			app.Fatal(err, false)
		}
		inst, err := idemotel.New(
			idemotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))),
			idemotel.WithNext(idem.SlogObserverLevel(nil, slog.LevelInfo)),
		)
		if err != nil {
			app.Fatal(err, false)
		}
		opts = inst.Options() // the requests counter and store latencies; logs still go to slog
		metricsHandler = promhttp.HandlerFor(registry, promhttp.HandlerOpts{})
	}
	engine, err := idem.New(store, append(flags.Store.Engine(), opts...)...)
	if err != nil {
		app.Fatal(err, false)
	}

	// Operations routes sit outside the idempotency middleware: their
	// requests are neither keyed, stored nor counted in its metrics.
	if metricsHandler != nil {
		r.Method(http.MethodGet, "/metrics", metricsHandler)
	}
	if adminToken != "" {
		// Sensitive: evicting a key lets the next duplicate run. Keep it
		// behind your own authentication; a bearer token stands in here.
		r.Handle("/admin/idem", requireToken(adminToken, engine.AdminHandler()))
	}

	svc := flags.Store.MustOrders(ctx)
	r.Group(func(api chi.Router) {
		api.Use(idemchi.Middleware(engine)) // POST and PATCH need an Idempotency-Key
		api.Post("/orders", svc.Create)
		api.Get("/orders", svc.List)
		api.Get("/orders/{id}", func(w http.ResponseWriter, r *http.Request) { svc.Get(w, r, param(r)) })
		api.Post("/orders/{id}/payments", func(w http.ResponseWriter, r *http.Request) { svc.Pay(w, r, param(r)) })
	})

	if err := app.Serve(ctx, "orders API on chi", flags.Store.String(), flags.Addr, r, engine.Close); err != nil {
		app.Fatal(err, false)
	}
}

// requireToken lets through only requests with "Authorization: Bearer
// token", compared in constant time.
func requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func param(r *http.Request) orders.Param {
	return func(name string) string { return chi.URLParam(r, name) }
}
