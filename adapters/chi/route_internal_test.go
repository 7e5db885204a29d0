package idemchi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
)

func TestMountPaths(t *testing.T) {
	for _, c := range []struct {
		known, values, want []string
	}{
		{[]string{"/api/*"}, []string{""}, []string{"/api"}},
		{[]string{"/*"}, []string{""}, []string{""}},
		{[]string{"/t/{tenant}/*", "/v1/*", "/orders/{id}"}, []string{"acme", "", "", "7"}, []string{"/t/acme", "/t/acme/v1"}},
		{[]string{"/n/{n:[0-9]{2}}/*"}, []string{"42", ""}, []string{"/n/42"}},
		{[]string{"/orders/{id}"}, []string{"7"}, nil},
		{[]string{"/a/{x}/*"}, nil, nil}, // values do not line up
		// Bare mount points ("/api" for r.Mount("/api", sub)) that chi
		// went through into a sub-router.
		{[]string{"/api/", "/*"}, []string{""}, []string{"/api", "/api"}},
		{[]string{"/t/{tenant}", "/v1/*", "/orders/{id}"}, []string{"acme", "", "7"}, []string{"/t/acme", "/t/acme/v1"}},
		{[]string{"/api/"}, nil, nil},
	} {
		got := mountPaths(c.known, c.values)
		if len(got) != len(c.want) {
			t.Errorf("mountPaths(%q, %q) = %q, want %q", c.known, c.values, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("mountPaths(%q, %q) = %q, want %q", c.known, c.values, got, c.want)
			}
		}
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"/": "/", "/orders/": "/orders", "/api/*/orders/{id}": "/api/orders/{id}",
		"/files/*": "/files/*", "/a//": "/a", "": "",
	} {
		if got := normalize(in); got != want {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkRouteTemplate measures the adapter's own work per request: the
// route look-up, before routing (top-level r.Use) and after (r.With).
func BenchmarkRouteTemplate(b *testing.B) {
	probe := func(b *testing.B) func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if route, ok := routeTemplate(r); !ok || route != "/api/orders/{id}" {
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
