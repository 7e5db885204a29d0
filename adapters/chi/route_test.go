package idemchi

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestRootPath covers the paths rebuilt from the mounts chi has entered;
// rest is what chi has left to route ("/x").
func TestRootPath(t *testing.T) {
	for _, c := range []struct {
		mounts, values []string
		want           string
	}{
		{[]string{"/api/*"}, []string{""}, "/api/x"},
		{[]string{"/*"}, []string{""}, "/x"},
		{[]string{"/t/{tenant}/*", "/v1/*"}, []string{"acme", "", "", "7"}, "/t/acme/v1/x"},
		{[]string{"/n/{n:[0-9]{2}}/*"}, []string{"42", ""}, "/n/42/x"},
		{[]string{"/a/{x}/*"}, nil, ""},              // values do not line up
		{[]string{"/api/*"}, []string{"orders"}, ""}, // a "*" chi has not cleared: not entered
		// Bare mount points ("/api" for r.Mount("/api", sub)) that chi
		// went through into a sub-router, which then routes "/".
		{[]string{"/api/", "/*"}, []string{""}, "/api/"},
		{[]string{"/t/{tenant}", "/v1/*"}, []string{"acme", "", "7"}, "/t/acme"},
		{[]string{"/api"}, nil, "/api"},
	} {
		if got := rootPath(c.mounts, c.values, "/x", ""); got != c.want {
			t.Errorf("rootPath(%q, %q, \"/x\") = %q, want %q", c.mounts, c.values, got, c.want)
		}
	}
	if got := rootPath([]string{"/api/*"}, []string{""}, "/x", "/api/x"); got != "/api/x" {
		t.Errorf("rootPath with the same URL path = %q", got)
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
