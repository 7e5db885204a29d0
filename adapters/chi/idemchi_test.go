package idemchi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	idemchi "github.com/idemkit/idem/adapters/chi"
	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

func newStore(t testing.TB) idem.Store {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	return s
}

// route is one route to mount in a given style.
type route struct {
	method, path string
	protected    bool
	opts         []idem.HTTPOption // per-route options
	h            http.HandlerFunc
}

func fixtureRoutes(f *conformance.Fixture) []route {
	var out []route
	for _, rt := range f.Routes() {
		out = append(out, route{rt.Method, rt.Path, rt.Protected, rt.Options, func(w http.ResponseWriter, r *http.Request) {
			rt.Handler(w, r, func(name string) string { return chi.URLParam(r, name) })
		}})
	}
	return out
}

// A style mounts routes on a chi router behind the middleware, with
// chi's Recoverer outermost. global holds the options that middleware
// mounted once needs to treat each route as its per-route options say.
type style struct {
	name  string
	mount func(e *idem.Engine, routes []route, global, base []idem.HTTPOption) http.Handler
}

var styles = []style{
	{"global", func(e *idem.Engine, routes []route, global, _ []idem.HTTPOption) http.Handler {
		r := chi.NewRouter()
		r.Use(middleware.Recoverer)
		r.Use(idemchi.Middleware(e, global...))
		for _, rt := range routes {
			r.Method(rt.method, rt.path, rt.h)
		}
		return r
	}},
	// Routes without options in one r.Group, the others with r.With, the
	// unprotected ones bare.
	{"per-route", func(e *idem.Engine, routes []route, _, base []idem.HTTPOption) http.Handler {
		r := chi.NewRouter()
		r.Use(middleware.Recoverer)
		r.Group(func(g chi.Router) {
			g.Use(idemchi.Middleware(e, base...))
			for _, rt := range routes {
				if rt.protected && len(rt.opts) == len(base) {
					g.Method(rt.method, rt.path, rt.h)
				}
			}
		})
		for _, rt := range routes {
			switch {
			case !rt.protected:
				r.Method(rt.method, rt.path, rt.h)
			case len(rt.opts) > len(base):
				r.With(idemchi.Middleware(e, rt.opts...)).Method(rt.method, rt.path, rt.h)
			}
		}
		return r
	}},
	// The middleware at the top, between rewriting middleware (before it)
	// and a logger (after it).
	{"global, with rewrites before", func(e *idem.Engine, routes []route, global, _ []idem.HTTPOption) http.Handler {
		r := chi.NewRouter()
		r.Use(middleware.Recoverer, middleware.CleanPath, middleware.StripSlashes, middleware.URLFormat, methodOverride)
		r.Use(idemchi.Middleware(e, global...))
		r.Use(quietLogger)
		for _, rt := range routes {
			r.Method(rt.method, rt.path, rt.h)
		}
		return r
	}},
	// Every route on a sub-router mounted at "/", the middleware in the
	// sub-router's r.Use: chi has shifted rctx.RoutePath when it runs.
	{"sub-router", func(e *idem.Engine, routes []route, global, _ []idem.HTTPOption) http.Handler {
		r := chi.NewRouter()
		r.Use(middleware.Recoverer)
		sub := chi.NewRouter()
		sub.Use(idemchi.Middleware(e, global...))
		for _, rt := range routes {
			sub.Method(rt.method, rt.path, rt.h)
		}
		r.Mount("/", sub)
		return r
	}},
}

func TestConformance(t *testing.T) {
	for _, s := range styles {
		t.Run(s.name, func(t *testing.T) {
			conformance.RunHTTP(t, conformance.Harness{
				NewStore: func(t *testing.T) idem.Store { return newStore(t) },
				Handler: func(t *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
					return s.mount(e, fixtureRoutes(f), f.GlobalOptions(), f.HTTPOptions())
				},
			})
		})
	}
}

// recorder collects the engine's events.
type recorder struct {
	mu     sync.Mutex
	events []idem.Event
}

func (r *recorder) observe(_ context.Context, ev idem.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) routes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events {
		out = append(out, ev.Route)
	}
	return out
}

func newEngine(t testing.TB, opts ...idem.Option) (*idem.Engine, *recorder) {
	rec := &recorder{}
	all := append([]idem.Option{idem.WithObserver(rec.observe)}, opts...)
	e, err := idem.New(newStore(t), all...)
	if err != nil {
		t.Fatal(err)
	}
	return e, rec
}

type result struct {
	code   int
	header http.Header
	body   string
}

func do(h http.Handler, method, target, key, body string) result {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return result{w.Code, w.Result().Header, w.Body.String()}
}

func (r result) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// TestMountingStyles checks, in each mounting style, the template that
// scopes keys, what passes through, error pages and panics.
func TestMountingStyles(t *testing.T) {
	for _, s := range styles {
		t.Run(s.name, func(t *testing.T) {
			// Each case gets a fresh fixture, engine and router.
			fixture := func(t *testing.T) (http.Handler, *conformance.Fixture, *recorder) {
				f := conformance.NewFixture(idem.WithNamespace(conformance.Namespace))
				e, rec := newEngine(t)
				return s.mount(e, fixtureRoutes(f), f.GlobalOptions(), f.HTTPOptions()), f, rec
			}
			t.Run("same key on /items/1 and /items/2 is 422", func(t *testing.T) {
				h, f, rec := fixture(t)
				if r := do(h, "POST", "/items/1", "k1", ""); r.code != 201 || r.body != "item:1" {
					t.Fatalf("first: %d %q", r.code, r.body)
				}
				if r := do(h, "POST", "/items/2", "k1", ""); r.code != 422 {
					t.Fatalf("second: %d %q, want 422", r.code, r.body)
				}
				if r := do(h, "POST", "/items/1", "k1", ""); r.code != 201 || !r.replayed() {
					t.Fatalf("retry: %d replayed=%v, want a replay", r.code, r.replayed())
				}
				if f.Count() != 1 {
					t.Errorf("handler ran %d times, want 1", f.Count())
				}
				for _, got := range rec.routes() {
					if got != "/items/{id}" {
						t.Errorf("route %q, want /items/{id}", got)
					}
				}
			})
			t.Run("same key on /echo and /items/1 runs both", func(t *testing.T) {
				h, f, _ := fixture(t)
				a := do(h, "POST", "/echo", "k1", "hi")
				b := do(h, "POST", "/items/1", "k1", "hi")
				if a.code != 201 || b.code != 201 || a.replayed() || b.replayed() || f.Count() != 2 {
					t.Fatalf("echo %d, items %d, count %d; want both fresh 201", a.code, b.code, f.Count())
				}
			})
			t.Run("404 and 405 pass through untouched even with a malformed key", func(t *testing.T) {
				h, f, rec := fixture(t)
				bare := chi.NewRouter()
				for _, rt := range fixtureRoutes(conformance.NewFixture()) {
					bare.Method(rt.method, rt.path, rt.h)
				}
				for _, c := range []struct {
					method, target string
					code           int
				}{{"POST", "/nope", 404}, {"PATCH", "/items/1", 405}, {"POST", "/counter", 405}, {"POST", "/items/1/x", 404}} {
					for _, key := range []string{"", "a,b", `"unterminated`, strings.Repeat("k", 300)} {
						got := do(h, c.method, c.target, key, "x")
						want := do(bare, c.method, c.target, key, "x")
						if got.code != c.code || got.body != want.body || got.header.Get("Content-Type") != want.header.Get("Content-Type") || got.header.Get("Allow") != want.header.Get("Allow") {
							t.Errorf("%s %s key %.10q: %d %q, want chi's own %d %q", c.method, c.target, key, got.code, got.body, c.code, want.body)
						}
					}
				}
				if n := len(rec.events); n != 0 || f.Count() != 0 {
					t.Errorf("the engine saw %d requests and the handlers ran %d times; want none", n, f.Count())
				}
			})
			t.Run("error pages: 4xx stored, 5xx released", func(t *testing.T) {
				h, f, _ := fixture(t)
				for i := 0; i < 2; i++ {
					if r := do(h, "POST", "/status/400", "k4", ""); r.code != 400 || r.body != "status:400" || r.replayed() != (i == 1) {
						t.Fatalf("400 #%d: %d %q replayed=%v", i, r.code, r.body, r.replayed())
					}
					if r := do(h, "POST", "/status/503", "k5", ""); r.code != 503 || r.replayed() {
						t.Fatalf("503 #%d: %d replayed=%v", i, r.code, r.replayed())
					}
				}
				if f.Count() != 3 {
					t.Errorf("handler ran %d times, want 3", f.Count())
				}
			})
			t.Run("panic answered by chi's Recoverer and released", func(t *testing.T) {
				h, f, _ := fixture(t)
				for range 2 {
					if r := do(h, "POST", "/panic", "kp", ""); r.code != 500 {
						t.Fatalf("panic: %d, want 500", r.code)
					}
				}
				if f.Count() != 2 {
					t.Errorf("handler ran %d times, want 2 (the key is released)", f.Count())
				}
			})
		})
	}
}

// TestStatusOnlyAndStreamedResponses covers responses the fixture does
// not make: status only, nothing written, and a flushed stream.
func TestStatusOnlyAndStreamedResponses(t *testing.T) {
	runs := 0
	routes := []route{
		{"POST", "/accepted", true, nil, func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.Header().Set("Location", "/jobs/1")
			w.WriteHeader(http.StatusAccepted)
		}},
		{"POST", "/nothing", true, nil, func(http.ResponseWriter, *http.Request) { runs++ }},
		{"POST", "/stream", true, nil, func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "part1 ")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			io.WriteString(w, "part2")
		}},
	}
	for _, s := range styles {
		t.Run(s.name, func(t *testing.T) {
			runs = 0
			e, _ := newEngine(t)
			h := s.mount(e, routes, nil, nil)
			for i := range 2 {
				r := do(h, "POST", "/accepted", "ka", "")
				if r.code != 202 || r.body != "" || r.header.Get("Location") != "/jobs/1" || r.replayed() != (i == 1) {
					t.Errorf("status only #%d: %d %q %v replayed=%v", i, r.code, r.body, r.header, r.replayed())
				}
				r = do(h, "POST", "/nothing", "kn", "")
				if r.code != 200 || r.body != "" || r.replayed() != (i == 1) {
					t.Errorf("nothing written #%d: %d %q replayed=%v", i, r.code, r.body, r.replayed())
				}
			}
			r := do(h, "POST", "/stream", "ks", "")
			if r.code != 200 || r.body != "part1 part2" || r.replayed() {
				t.Errorf("stream: %d %q replayed=%v", r.code, r.body, r.replayed())
			}
			r = do(h, "POST", "/stream", "ks", "")
			if r.code != 200 || r.body != "" || !r.replayed() || r.header.Get(idem.HeaderBodyOmitted) != "true" || r.header.Get("Content-Type") != "text/plain" {
				t.Errorf("stream replay: %d %q %v", r.code, r.body, r.header)
			}
			if runs != 3 {
				t.Errorf("handlers ran %d times, want 3", runs)
			}
		})
	}
}

// TestRouteTemplate checks that every way of mounting the middleware scopes
// keys by the same full template.
func TestRouteTemplate(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }
	orders := func(mw func(http.Handler) http.Handler) chi.Router {
		sub := chi.NewRouter()
		if mw != nil {
			sub.Use(mw)
		}
		sub.Post("/orders/{id}", ok)
		return sub
	}
	cases := []struct {
		name   string
		target string
		want   string
		build  func(mw func(http.Handler) http.Handler) http.Handler
	}{
		{"top-level Use", "/orders/7", "/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(mw)
			r.Post("/orders/{id}", ok)
			return r
		}},
		{"With", "/orders/7", "/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.With(mw).Post("/orders/{id}", ok)
			return r
		}},
		{"Group", "/orders/7", "/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Group(func(r chi.Router) { r.Use(mw); r.Post("/orders/{id}", ok) })
			return r
		}},
		{"trailing slash", "/orders/7/", "/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(mw)
			r.Post("/orders/{id}/", ok)
			return r
		}},
		{"StripSlashes inline, after routing", "/orders/7/", "/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.With(middleware.StripSlashes, mw).Post("/orders/{id}/", ok)
			return r
		}},
		{"top-level Use, Route", "/api/orders/7", "/api/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(mw)
			r.Route("/api", func(r chi.Router) { r.Post("/orders/{id}", ok) })
			return r
		}},
		{"Use inside Route", "/api/orders/7", "/api/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/api", func(r chi.Router) { r.Use(mw); r.Post("/orders/{id}", ok) })
			return r
		}},
		{"With inside Route", "/api/orders/7", "/api/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/api", func(r chi.Router) { r.With(mw).Post("/orders/{id}", ok) })
			return r
		}},
		{"Group inside Route", "/api/orders/7", "/api/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/api", func(r chi.Router) {
				r.Group(func(r chi.Router) { r.Use(mw); r.Post("/orders/{id}", ok) })
			})
			return r
		}},
		{"top-level Use, Mount", "/api/orders/7", "/api/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(mw)
			r.Mount("/api", orders(nil))
			return r
		}},
		{"Use in the mounted router", "/api/orders/7", "/api/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Mount("/api", orders(mw))
			return r
		}},
		{"With before Mount", "/api/orders/7", "/api/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.With(mw).Mount("/api", orders(nil))
			return r
		}},
		{"nested mounts with parameters", "/t/acme/v1/orders/7", "/t/{tenant}/v1/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/t/{tenant}", func(r chi.Router) { r.Mount("/v1", orders(mw)) })
			return r
		}},
		{"With before a nested Mount", "/t/acme/v1/orders/7", "/t/{tenant}/v1/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/t/{tenant}", func(r chi.Router) { r.With(mw).Mount("/v1", orders(nil)) })
			return r
		}},
		{"StripSlashes, then Use in a sub-router", "/t/acme/v1/orders/7/", "/t/{tenant}/v1/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(middleware.StripSlashes)
			r.Route("/t/{tenant}", func(r chi.Router) { r.Mount("/v1", orders(mw)) })
			return r
		}},
		{"URLFormat, then Use in a sub-router", "/api/orders/7.json", "/api/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Use(middleware.URLFormat)
			r.Mount("/api", orders(mw))
			return r
		}},
		{"root route shadowing the sub-router's", "/api/orders/7", "/api/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Post("/orders/{id}", ok)
			r.Mount("/api", orders(mw))
			return r
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, rec := newEngine(t)
			h := c.build(idemchi.Middleware(e))
			if r := do(h, "POST", c.target, "k", ""); r.code != 201 {
				t.Fatalf("POST %s: %d %q", c.target, r.code, r.body)
			}
			if r := do(h, "POST", c.target, "k", ""); !r.replayed() {
				t.Errorf("retry not replayed")
			}
			for _, got := range rec.routes() {
				if got != c.want {
					t.Errorf("route %q, want %q", got, c.want)
				}
			}
			// Unmatched under the same mounting passes through.
			for _, target := range []string{"/api/nope", "/nope", "/t/acme/v1/nope", "/api/orders/7/x"} {
				if r := do(h, "POST", target, "a,b", ""); r.code != 404 {
					t.Errorf("POST %s: %d %q, want 404", target, r.code, r.body)
				}
			}
			if n := len(rec.routes()); n != 2 {
				t.Errorf("the engine saw %d requests, want 2", n)
			}
		})
	}
}

func TestRouteOptions(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }
	e, _ := newEngine(t)
	r := chi.NewRouter()
	r.With(idemchi.Middleware(e, idem.Optional())).Post("/optional", ok)
	r.With(idemchi.Middleware(e, idem.Skip())).Post("/skipped", ok)
	r.Group(func(r chi.Router) {
		r.Use(idemchi.Middleware(e))
		r.Post("/required", ok)
	})
	r.Route("/global", func(r chi.Router) {
		r.Use(idemchi.Middleware(e, idem.ForRoute("POST", "/global/free/{id}", idem.Optional())))
		r.Post("/free/{id}", ok)
		r.Post("/strict/{id}", ok)
	})
	for _, c := range []struct {
		target, key string
		code        int
	}{
		{"/optional", "", 201}, {"/optional", "a,b", 400},
		{"/skipped", "", 201}, {"/skipped", "a,b", 201},
		{"/required", "", 400}, {"/required", "k", 201},
		{"/global/free/1", "", 201}, {"/global/strict/1", "", 400},
	} {
		if r := do(r, "POST", c.target, c.key, ""); r.code != c.code {
			t.Errorf("POST %s key %q: %d, want %d", c.target, c.key, r.code, c.code)
		}
	}
}

// Outside a chi router the middleware still protects, scoping keys by
// method and namespace only.
func TestWithoutChi(t *testing.T) {
	e, rec := newEngine(t)
	h := idemchi.Middleware(e)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	do(h, "POST", "/x", "k", "")
	if r := do(h, "POST", "/x", "k", ""); r.code != 201 || !r.replayed() {
		t.Errorf("retry: %d replayed=%v", r.code, r.replayed())
	}
	if got := rec.routes(); len(got) != 2 || got[0] != "" {
		t.Errorf("routes %q, want two empty", got)
	}
}

// TestNestedMiddleware checks the middleware mounted at the top of the
// router and again on a route, a group or a sub-router: the outer one
// protects the request, once, and its policy applies; the inner one passes
// through.
func TestNestedMiddleware(t *testing.T) {
	e, rec := newEngine(t)
	runs := 0
	h := func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made")
	}
	r := chi.NewRouter()
	r.Use(idemchi.Middleware(e))
	r.With(idemchi.Middleware(e, idem.TTL(time.Hour))).Post("/x", h)
	r.With(idemchi.Middleware(e, idem.Optional())).Post("/opt", h)
	r.Group(func(r chi.Router) {
		r.Use(idemchi.Middleware(e))
		r.Post("/g", h)
	})
	r.Route("/api", func(r chi.Router) {
		r.Use(idemchi.Middleware(e))
		r.With(idemchi.Middleware(e)).Post("/orders/{id}", h)
	})
	for _, c := range []struct{ target, route string }{
		{"/x", "/x"}, {"/g", "/g"}, {"/api/orders/7", "/api/orders/{id}"},
	} {
		runs = 0
		rec.mu.Lock()
		rec.events = nil
		rec.mu.Unlock()
		for i := range 2 {
			got := do(r, "POST", c.target, "nested", "")
			if got.code != http.StatusCreated || got.body != "made" || got.replayed() != (i == 1) {
				t.Errorf("%s #%d: %d %q replayed=%v", c.target, i, got.code, got.body, got.replayed())
			}
		}
		if runs != 1 {
			t.Errorf("%s: handler ran %d times, want 1", c.target, runs)
		}
		if got := rec.routes(); len(got) != 2 || got[0] != c.route || got[1] != c.route {
			t.Errorf("%s: the engine saw routes %q, want %q twice", c.target, got, c.route)
		}
	}
	// The inner middleware's Optional does not apply: the outer one
	// requires a key.
	if got := do(r, "POST", "/opt", "", ""); got.code != http.StatusBadRequest {
		t.Errorf("no key under the outer policy: %d %q, want 400", got.code, got.body)
	}
}

// TestRouteTemplateSubRouters covers sub-router layouts where the part of
// the path a sub-router routes also routes from the root, bare mount
// points, and a rewritten path beside a catch-all: the template is chi's,
// and the request is protected.
func TestRouteTemplateSubRouters(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }
	for _, c := range []struct {
		name, target, want string
		build              func(mw func(http.Handler) http.Handler) http.Handler
	}{
		// "/orders/7" routes from the root too, as /{tenant}/{id}.
		{"tenant sub-router", "/acme/orders/7", "/{tenant}/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/{tenant}", func(r chi.Router) {
				r.Use(mw)
				r.Post("/{id}", ok)
				r.Post("/orders/{id}", ok)
			})
			return r
		}},
		{"tenant sub-router, sibling", "/acme/7", "/{tenant}/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/{tenant}", func(r chi.Router) {
				r.Use(mw)
				r.Post("/{id}", ok)
				r.Post("/orders/{id}", ok)
			})
			return r
		}},
		// chi goes into the sub-router mounted at "/api" with "/", and on
		// into the one mounted at "/" there.
		{"Mount at / below a bare mount point", "/api", "/api", func(mw func(http.Handler) http.Handler) http.Handler {
			legacy := chi.NewRouter()
			legacy.Use(mw)
			legacy.Post("/", ok)
			r := chi.NewRouter()
			r.Route("/api", func(r chi.Router) { r.Mount("/", legacy) })
			return r
		}},
		{"catch-all at a bare mount point, With", "/files", "/files/*", func(mw func(http.Handler) http.Handler) http.Handler {
			r := chi.NewRouter()
			r.Route("/files", func(r chi.Router) { r.With(mw).Post("/*", ok) })
			return r
		}},
		// The URL path, which StripSlashes rewrote, routes to the
		// catch-all: the path chi routes by goes to /orders/{id}.
		{"StripSlashes, then With before a Mount with a catch-all", "/api/orders/7/", "/api/orders/{id}", func(mw func(http.Handler) http.Handler) http.Handler {
			sub := chi.NewRouter()
			sub.Post("/*", ok)
			sub.Post("/orders/{id}", ok)
			r := chi.NewRouter()
			r.Use(middleware.StripSlashes)
			r.With(mw).Mount("/api", sub)
			return r
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, rec := newEngine(t)
			h := c.build(idemchi.Middleware(e))
			if r := do(h, "POST", c.target, "k", ""); r.code != 201 || r.replayed() {
				t.Fatalf("POST %s: %d %q replayed=%v", c.target, r.code, r.body, r.replayed())
			}
			if r := do(h, "POST", c.target, "k", ""); r.code != 201 || !r.replayed() {
				t.Errorf("retry: %d replayed=%v, want a replay", r.code, r.replayed())
			}
			if got := rec.routes(); len(got) != 2 || got[0] != c.want || got[1] != c.want {
				t.Errorf("routes %q, want %q twice", got, c.want)
			}
		})
	}
}

// TestNilOptions checks that nil options, given to the middleware or
// inside idem.ForRoute, are ignored: the other options apply.
func TestNilOptions(t *testing.T) {
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }
	e, _ := newEngine(t)
	r := chi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(idemchi.Middleware(e, nil, idem.ForRoute("POST", "/free", nil, idem.Optional()), nil))
		r.Post("/free", ok)
		r.Post("/strict", ok)
	})
	r.With(idemchi.Middleware(e, nil, idem.Optional())).Post("/opt", ok)
	for _, c := range []struct {
		target, key string
		code        int
		replayed    bool
	}{
		{"/free", "", 201, false}, {"/strict", "", 400, false}, {"/opt", "", 201, false},
		{"/strict", "k", 201, false}, {"/strict", "k", 201, true},
	} {
		if got := do(r, "POST", c.target, c.key, ""); got.code != c.code || got.replayed() != c.replayed {
			t.Errorf("POST %s key %q: %d replayed=%v, want %d replayed=%v", c.target, c.key, got.code, got.replayed(), c.code, c.replayed)
		}
	}
}
