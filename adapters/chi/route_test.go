package idemchi

import (
	"cmp"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
)

// BenchmarkRouteTemplate measures the adapter's own work per request: the
// route look-up, before routing (top-level r.Use), after (r.With), and
// in a sub-router's r.Use.
func BenchmarkRouteTemplate(b *testing.B) {
	probe := func(b *testing.B) func(http.Handler) http.Handler {
		var res resolver
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rctx := chi.RouteContext(r.Context())
				method := cmp.Or(rctx.RouteMethod, r.Method)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if route, ok := res.route(w, r, rctx, method); !ok || route != "/api/orders/{id}" {
						b.Fatalf("route %q %v", route, ok)
					}
				}
				b.StopTimer()
			})
		}
	}
	h := func(http.ResponseWriter, *http.Request) {}
	for _, c := range []struct {
		name  string
		build func(mw func(http.Handler) http.Handler) http.Handler
	}{
		{"Use", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(mw)
			r.Route("/api", func(r chi.Router) { r.Post("/orders/{id}", h) })
			return r
		}},
		{"With", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/api", func(r chi.Router) { r.With(mw).Post("/orders/{id}", h) })
			return r
		}},
		{"sub-router Use", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/api", func(r chi.Router) { r.Use(mw); r.Post("/orders/{id}", h) })
			return r
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.build(probe(b)).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/api/orders/7", nil))
		})
	}
}
