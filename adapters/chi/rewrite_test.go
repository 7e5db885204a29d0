package idemchi_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	idemchi "github.com/idemkit/idem/adapters/chi"
)

// mw is a middleware that may rewrite the request on its way to the
// router, with requests that reach a protected handler only through it.
type mw struct {
	name     string
	h        func(http.Handler) http.Handler
	variants []variant // "" when the middleware rewrites nothing
}

// A variant is a request a middleware may route to a protected handler.
type variant struct{ method, target, override string }

// methodOverride sets the method from X-HTTP-Method-Override, for any
// method: the most a method override can do.
func methodOverride(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := r.Header.Get("X-HTTP-Method-Override"); m != "" {
			r.Method = m
		}
		next.ServeHTTP(w, r)
	})
}

var quietLogger = middleware.RequestLogger(&middleware.DefaultLogFormatter{Logger: log.New(io.Discard, "", 0), NoColor: true})

// rewriters are the middleware of issue 16 item 3 and the usual company.
var rewriters = []mw{
	{"StripSlashes", middleware.StripSlashes, []variant{{"POST", "/orders/7/", ""}, {"POST", "/orders/", ""}}},
	{"CleanPath", middleware.CleanPath, []variant{{"POST", "/orders//7", ""}, {"POST", "/x/../orders", ""}}},
	{"URLFormat", middleware.URLFormat, []variant{{"POST", "/orders.json", ""}}},
	{"PathRewrite", middleware.PathRewrite("/v1/", "/"), []variant{{"POST", "/v1/orders/7", ""}}},
	{"method override", methodOverride, []variant{{"GET", "/orders/7", "POST"}, {"POST", "/orders/7", "PUT"}, {"GET", "/orders/7", "PATCH"}}},
	{"Recoverer", middleware.Recoverer, nil},
	{"logger", quietLogger, nil},
}

// counts are the runs of each handler.
type counts struct{ protected, other atomic.Int64 }

// orderRoutes declares POST /orders, POST /orders/{id} and PATCH
// /orders/{id} (protected), and GET /orders/{id} and PUT /orders/{id}
// (not).
func orderRoutes(r chi.Router, n *counts) {
	prot := func(w http.ResponseWriter, r *http.Request) {
		n.protected.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made "+chi.RouteContext(r.Context()).RoutePattern())
	}
	other := func(w http.ResponseWriter, r *http.Request) {
		n.other.Add(1)
		io.WriteString(w, "other")
	}
	r.Post("/orders", prot)
	r.Post("/orders/{id}", prot)
	r.Patch("/orders/{id}", prot)
	r.Get("/orders/{id}", other)
	r.Put("/orders/{id}", other)
}

// A placement is where the rewriting middleware and idem go, and whether
// a rewritten request must reach its route, protected (a rewrite before
// idem and before chi routes); otherwise it may also be refused (a
// rewrite after idem, before chi routes) or never routed there (a
// rewrite after chi routes).
type placement struct {
	name   string
	prefix string // where the routes are mounted
	works  bool   // a variant reaches its protected route, protected
	build  func(m, idem func(http.Handler) http.Handler, n *counts) http.Handler
}

func use(r chi.Router, mws ...func(http.Handler) http.Handler) {
	for _, m := range mws {
		if m != nil {
			r.Use(m)
		}
	}
}

func with(r chi.Router, mws ...func(http.Handler) http.Handler) chi.Router {
	for _, m := range mws {
		if m != nil {
			r = r.With(m)
		}
	}
	return r
}

var placements = []placement{
	{"rewrite then idem, both top-level Use", "", true, func(m, idem func(http.Handler) http.Handler, n *counts) http.Handler {
		r := chi.NewRouter()
		use(r, m, idem)
		orderRoutes(r, n)
		return r
	}},
	{"idem then rewrite, both top-level Use", "", false, func(m, idem func(http.Handler) http.Handler, n *counts) http.Handler {
		r := chi.NewRouter()
		use(r, idem, m)
		orderRoutes(r, n)
		return r
	}},
	{"rewrite in Use, idem in Group", "", true, func(m, idem func(http.Handler) http.Handler, n *counts) http.Handler {
		r := chi.NewRouter()
		use(r, m)
		r.Group(func(r chi.Router) { use(r, idem); orderRoutes(r, n) })
		return r
	}},
	{"idem and rewrite inline, With", "", false, func(m, idem func(http.Handler) http.Handler, n *counts) http.Handler {
		r := chi.NewRouter()
		orderRoutes(with(r, m, idem), n)
		return r
	}},
	{"rewrite in Use, idem in a sub-router's Use", "/api", true, func(m, idem func(http.Handler) http.Handler, n *counts) http.Handler {
		r := chi.NewRouter()
		use(r, m)
		r.Route("/api", func(r chi.Router) { use(r, idem); orderRoutes(r, n) })
		return r
	}},
	{"idem then rewrite in a sub-router's Use", "/api", false, func(m, idem func(http.Handler) http.Handler, n *counts) http.Handler {
		r := chi.NewRouter()
		r.Route("/api", func(r chi.Router) { use(r, idem, m); orderRoutes(r, n) })
		return r
	}},
	{"idem top-level, rewrite in a mounted router", "/api", false, func(m, idem func(http.Handler) http.Handler, n *counts) http.Handler {
		sub := chi.NewRouter()
		use(sub, m)
		orderRoutes(sub, n)
		r := chi.NewRouter()
		use(r, idem)
		r.Mount("/api", sub)
		return r
	}},
	{"rewrite top-level, idem inline in a mounted router", "/api", true, func(m, idem func(http.Handler) http.Handler, n *counts) http.Handler {
		sub := chi.NewRouter()
		orderRoutes(with(sub, idem), n)
		r := chi.NewRouter()
		use(r, m)
		r.Mount("/api", sub)
		return r
	}},
}

// prefixed puts a variant's target under the prefix the routes are
// mounted at, keeping the part a rewrite acts on.
func prefixed(prefix, target string) string {
	if rest, ok := strings.CutPrefix(target, "/v1/"); ok {
		return "/v1" + prefix + "/" + rest // PathRewrite removes "/v1"
	}
	if rest, ok := strings.CutPrefix(target, "/x/../"); ok {
		return prefix + "/x/../" + rest
	}
	return prefix + target
}

func send(h http.Handler, v variant, target, key string) result {
	r := httptest.NewRequest(v.method, target, strings.NewReader(`{"n":1}`))
	if v.override != "" {
		r.Header.Set("X-HTTP-Method-Override", v.override)
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return result{w.Code, w.Result().Header, w.Body.String()}
}

// TestRewritingMiddleware is the middleware-order matrix of issue 16 on
// chi: each rewriting middleware before and after idem, at the top of the
// router, in groups, inline and in sub-routers. Whatever the order, a
// protected handler never runs without a key and runs once for a key
// sent twice; where the rewrite comes before idem the request is served
// as usual, and where it comes after idem (before chi routes) the
// rewritten request is refused.
func TestRewritingMiddleware(t *testing.T) {
	for _, pl := range placements {
		for _, m := range rewriters {
			t.Run(pl.name+"/"+m.name, func(t *testing.T) {
				vs := append([]variant{{"POST", "/orders/7", ""}, {"PATCH", "/orders/7", ""}}, m.variants...)
				for i, v := range vs {
					e, _ := newEngine(t)
					n := new(counts)
					h := pl.build(m.h, idemchi.Middleware(e), n)
					target := prefixed(pl.prefix, v.target)
					noKey := send(h, v, target, "")
					if n.protected.Load() != 0 {
						t.Errorf("%s %s (override %q), no key: %d %q: the protected handler ran unprotected", v.method, target, v.override, noKey.code, noKey.body)
						continue
					}
					first := send(h, v, target, "k")
					second := send(h, v, target, "k")
					ran := n.protected.Load()
					if ran > 1 {
						t.Errorf("%s %s (override %q) twice with one key: the protected handler ran %d times (%d %q, %d %q)", v.method, target, v.override, ran, first.code, first.body, second.code, second.body)
						continue
					}
					plain := i < 2 || m.variants == nil
					switch {
					case ran == 1 && noKey.code != http.StatusBadRequest:
						t.Errorf("%s %s (override %q), no key: %d, want 400", v.method, target, v.override, noKey.code)
					case ran == 1 && (first.code != 201 || second.code != 201 || !second.replayed()):
						t.Errorf("%s %s (override %q): %d %q then %d replayed=%v, want 201 and a replay", v.method, target, v.override, first.code, first.body, second.code, second.replayed())
					case ran == 0 && (plain || pl.works) && n.other.Load() == 0:
						t.Errorf("%s %s (override %q): %d %q, want it served protected", v.method, target, v.override, first.code, first.body)
					}
				}
			})
		}
	}
}

// TestRewritingMiddlewareUnmatched checks that a request chi routes
// nowhere gets chi's own 404 or 405, whatever its key, in each placement
// and beside each middleware: failing closed changes nothing for it.
func TestRewritingMiddlewareUnmatched(t *testing.T) {
	for _, pl := range placements {
		for _, m := range rewriters {
			t.Run(pl.name+"/"+m.name, func(t *testing.T) {
				e, rec := newEngine(t)
				n := new(counts)
				h := pl.build(m.h, idemchi.Middleware(e), n)
				bare := pl.build(m.h, nil, new(counts))
				for _, v := range []variant{{"POST", "/nope", ""}, {"PATCH", "/orders", ""}, {"POST", "/orders/7/x", ""}} {
					target := prefixed(pl.prefix, v.target)
					for _, key := range []string{"", "k", "a,b"} {
						got, want := send(h, v, target, key), send(bare, v, target, key)
						if got.code != want.code || got.body != want.body || !sameAllow(got.header, want.header) {
							t.Errorf("%s %s key %q: %d %q Allow %q, want chi's %d %q Allow %q", v.method, target, key, got.code, got.body, got.header.Values("Allow"), want.code, want.body, want.header.Values("Allow"))
						}
					}
				}
				if len(rec.routes()) != 0 || n.protected.Load() != 0 {
					t.Errorf("the engine saw %d requests, the handlers ran %d times; want none", len(rec.routes()), n.protected.Load())
				}
			})
		}
	}
}

func sameAllow(a, b http.Header) bool {
	x, y := slices.Clone(a.Values("Allow")), slices.Clone(b.Values("Allow"))
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// TestRefusedAsChi checks that a request the middleware refuses gets the
// answer of the router chi would have reached: its own NotFound and
// MethodNotAllowed handlers, a sub-router's included, and a 405 at the
// bare mount point of a sub-router that does not route "/" for the
// method.
func TestRefusedAsChi(t *testing.T) {
	text := func(code int, s string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code); io.WriteString(w, s) }
	}
	build := func(top, inner func(http.Handler) http.Handler) http.Handler {
		r := chi.NewRouter()
		r.NotFound(text(404, "root's 404"))
		use(r, top)
		r.Route("/api", func(r chi.Router) {
			r.NotFound(text(404, "api's 404"))
			use(r, inner)
			r.Post("/orders", text(201, "made"))
		})
		r.Route("/custom", func(r chi.Router) {
			r.MethodNotAllowed(text(405, "custom's 405"))
			use(r, inner)
			r.Post("/orders", text(201, "made"))
		})
		r.Route("/list", func(r chi.Router) {
			use(r, inner)
			r.Get("/", text(200, "list"))
		})
		return r
	}
	for _, c := range []struct{ name, target string }{
		{"root's NotFound", "/nope"},
		{"a sub-router's NotFound", "/api/nope"},
		{"chi's 405 in a sub-router", "/api/orders"},
		{"a sub-router's MethodNotAllowed", "/custom/orders"},
		{"405 at a bare mount point", "/list"},
		{"405 at a bare mount point with a slash", "/list/"},
	} {
		for _, at := range []string{"top-level Use", "sub-router Use"} {
			t.Run(c.name+"/"+at, func(t *testing.T) {
				e, rec := newEngine(t)
				mw := idemchi.Middleware(e)
				h := build(mw, nil)
				if at != "top-level Use" {
					h = build(nil, mw)
				}
				bare := build(nil, nil)
				method := "PATCH"
				if c.target == "/nope" || c.target == "/api/nope" || strings.HasPrefix(c.target, "/list") {
					method = "POST"
				}
				for _, key := range []string{"", "a,b"} {
					got, want := send(h, variant{method: method}, c.target, key), send(bare, variant{method: method}, c.target, key)
					if got.code != want.code || got.body != want.body || !sameAllow(got.header, want.header) && c.name != "a sub-router's MethodNotAllowed" {
						t.Errorf("%s %s key %q: %d %q Allow %q, want chi's %d %q Allow %q", method, c.target, key, got.code, got.body, got.header.Values("Allow"), want.code, want.body, want.header.Values("Allow"))
					}
				}
				if n := len(rec.routes()); n != 0 {
					t.Errorf("the engine saw %d requests, want none", n)
				}
			})
		}
	}
}
