package idemechov5_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	idemechov5 "github.com/idemkit/idem/adapters/echov5"
	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
)

// anyOverride sets the method from X-HTTP-Method-Override, for any
// method: the most a method override can do (Echo's own overrides POST
// only).
func anyOverride(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if m := c.Request().Header.Get("X-HTTP-Method-Override"); m != "" {
			c.Request().Method = m
		}
		return next(c)
	}
}

// A variant is a request a middleware may route to a protected handler.
type variant struct{ method, target, override string }

// A rewriter is a middleware with the requests that reach a protected
// handler only through it (in Echo.Pre, before routing).
type rewriter struct {
	name     string
	mw       echo.MiddlewareFunc
	variants []variant
}

var overrides = []variant{{"GET", "/orders/7", "POST"}, {"POST", "/orders/7", "PUT"}, {"GET", "/orders/7", "PATCH"}}

var rewriters = []rewriter{
	{"RemoveTrailingSlash", middleware.RemoveTrailingSlash(), []variant{{"POST", "/orders/7/", ""}, {"POST", "/orders/", ""}}},
	{"Rewrite", middleware.Rewrite(map[string]string{"/v1/*": "/$1"}), []variant{{"POST", "/v1/orders/7", ""}}},
	{"MethodOverride", middleware.MethodOverride(), []variant{{"POST", "/orders/7", "PUT"}, {"POST", "/orders/7", "PATCH"}}},
	{"any method override", anyOverride, overrides},
	{"Recover", middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}), nil},
	{"RequestLogger", middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		LogStatus: true, LogURI: true,
		LogValuesFunc: func(*echo.Context, middleware.RequestLoggerValues) error { return nil },
	}), nil},
}

// runCounts are the runs of the protected and the other handlers.
type runCounts struct{ protected, other atomic.Int64 }

// orderRoutes declares POST /orders, POST and PATCH /orders/:id
// (protected), and GET and PUT /orders/:id (not), with mws.
func orderRoutes(add func(method, path string, h echo.HandlerFunc, mws ...echo.MiddlewareFunc) echo.RouteInfo, n *runCounts, mws ...echo.MiddlewareFunc) {
	prot := func(c *echo.Context) error {
		n.protected.Add(1)
		return c.String(http.StatusCreated, "made "+c.Path())
	}
	other := func(c *echo.Context) error {
		n.other.Add(1)
		return c.String(http.StatusOK, "other")
	}
	add(http.MethodPost, "/orders", prot, mws...)
	add(http.MethodPost, "/orders/:id", prot, mws...)
	add(http.MethodPatch, "/orders/:id", prot, mws...)
	add(http.MethodGet, "/orders/:id", other, mws...)
	add(http.MethodPut, "/orders/:id", other, mws...)
}

// A placement puts a middleware and idem somewhere; works says that a
// variant must reach its route, protected (the middleware rewrites
// before Echo routes, and before idem).
type placement struct {
	name   string
	prefix string
	works  bool
	build  func(m, idem echo.MiddlewareFunc, n *runCounts) *echo.Echo
}

func quietEcho() *echo.Echo {
	e := echo.New()
	e.Logger = slog.New(slog.DiscardHandler)
	return e
}

var placements = []placement{
	{"Pre, idem in Use", "", true, func(m, idem echo.MiddlewareFunc, n *runCounts) *echo.Echo {
		e := quietEcho()
		e.Pre(m)
		e.Use(idem)
		orderRoutes(e.Add, n)
		return e
	}},
	{"Pre, idem in a group", "/api", true, func(m, idem echo.MiddlewareFunc, n *runCounts) *echo.Echo {
		e := quietEcho()
		e.Pre(m)
		orderRoutes(e.Group("/api", idem).Add, n)
		return e
	}},
	{"Pre, idem on the routes", "", true, func(m, idem echo.MiddlewareFunc, n *runCounts) *echo.Echo {
		e := quietEcho()
		e.Pre(m)
		orderRoutes(e.Add, n, idem)
		return e
	}},
	{"Use, before idem", "", false, func(m, idem echo.MiddlewareFunc, n *runCounts) *echo.Echo {
		e := quietEcho()
		e.Use(m, idem)
		orderRoutes(e.Add, n)
		return e
	}},
	{"Use, after idem", "", false, func(m, idem echo.MiddlewareFunc, n *runCounts) *echo.Echo {
		e := quietEcho()
		e.Use(idem, m)
		orderRoutes(e.Add, n)
		return e
	}},
	{"Pre, before idem in Pre", "", true, func(m, idem echo.MiddlewareFunc, n *runCounts) *echo.Echo {
		e := quietEcho()
		e.Pre(m, idem)
		orderRoutes(e.Add, n)
		return e
	}},
	{"Pre, after idem in Pre", "", false, func(m, idem echo.MiddlewareFunc, n *runCounts) *echo.Echo {
		e := quietEcho()
		e.Pre(idem, m)
		orderRoutes(e.Add, n)
		return e
	}},
}

// prefixed puts a variant's target under prefix, keeping the part a
// rewrite acts on.
func prefixed(prefix, target string) string {
	if rest, ok := strings.CutPrefix(target, "/v1/"); ok {
		return "/v1" + prefix + "/" + rest
	}
	return prefix + target
}

func send(h http.Handler, v variant, target, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(v.method, target, strings.NewReader(`{"n":1}`))
	if v.override != "" {
		r.Header.Set("X-HTTP-Method-Override", v.override)
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func isReplay(w *httptest.ResponseRecorder) bool {
	return w.Header().Get("Idempotent-Replayed") == "true"
}

// unsupported are the orders the package documentation rules out, with
// the reason: the test skips them.
var unsupported = map[string]string{
	"Pre, after idem in Pre/any method override": "in Echo.Pre, a later middleware that turns a GET into a POST is not seen: Echo routes by the method it then finds (Echo's own MethodOverride changes POST only)",
}

// TestRewritingMiddleware is the middleware-order matrix of issue 16 on
// Echo v5: each rewriting middleware in Echo.Pre and Echo.Use, before and
// after idem, with idem in Use, a group, the routes or Pre. Whatever the
// order, a protected handler never runs without a key and runs once for
// a key sent twice; where the rewrite comes before Echo routes and before
// idem, the request is served as usual.
func TestRewritingMiddleware(t *testing.T) {
	for _, pl := range placements {
		for _, m := range rewriters {
			t.Run(pl.name+"/"+m.name, func(t *testing.T) {
				for _, k := range []string{pl.name, pl.name + "/" + m.name} {
					if why := unsupported[k]; why != "" && m.variants != nil {
						t.Skip(why)
					}
				}
				vs := append([]variant{{"POST", "/orders/7", ""}, {"PATCH", "/orders/7", ""}}, m.variants...)
				for i, v := range vs {
					eng, _ := newEngine(t)
					n := new(runCounts)
					h := pl.build(m.mw, idemechov5.Middleware(eng), n)
					target := prefixed(pl.prefix, v.target)
					noKey := send(h, v, target, "")
					if n.protected.Load() != 0 {
						t.Errorf("%s %s (override %q), no key: %d %q: the protected handler ran unprotected", v.method, target, v.override, noKey.Code, noKey.Body)
						continue
					}
					first, second := send(h, v, target, "k"), send(h, v, target, "k")
					switch ran := n.protected.Load(); {
					case ran > 1:
						t.Errorf("%s %s (override %q) twice with one key: the protected handler ran %d times", v.method, target, v.override, ran)
					case ran == 1 && noKey.Code != http.StatusBadRequest:
						t.Errorf("%s %s (override %q), no key: %d, want 400", v.method, target, v.override, noKey.Code)
					case ran == 1 && (first.Code != 201 || second.Code != 201 || !isReplay(second)):
						t.Errorf("%s %s (override %q): %d %q then %d replayed=%v, want 201 and a replay", v.method, target, v.override, first.Code, first.Body, second.Code, isReplay(second))
					case ran == 0 && (i < 2 || pl.works) && n.other.Load() == 0:
						t.Errorf("%s %s (override %q): %d %q, want it served protected", v.method, target, v.override, first.Code, first.Body)
					}
				}
			})
		}
	}
}

// TestRewritingMiddlewareUnmatched checks that a request Echo routes
// nowhere gets Echo's own 404 or 405 whatever its key, in each placement.
func TestRewritingMiddlewareUnmatched(t *testing.T) {
	for _, pl := range placements {
		for _, m := range rewriters {
			t.Run(pl.name+"/"+m.name, func(t *testing.T) {
				eng, rec := newEngine(t)
				n := new(runCounts)
				h := pl.build(m.mw, idemechov5.Middleware(eng), n)
				// The same router with a middleware that does nothing in
				// idem's place (a group with middleware routes 404s as its
				// own).
				bare := pl.build(m.mw, func(next echo.HandlerFunc) echo.HandlerFunc { return next }, new(runCounts))
				for _, v := range []variant{{"POST", "/nope", ""}, {"PATCH", "/orders", ""}, {"POST", "/nope/7", ""}} {
					target := prefixed(pl.prefix, v.target)
					for _, key := range []string{"", "k", "a,b"} {
						got, want := send(h, v, target, key), send(bare, v, target, key)
						if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Allow") != want.Header().Get("Allow") {
							t.Errorf("%s %s key %q: %d %q, want Echo's %d %q", v.method, target, key, got.Code, got.Body, want.Code, want.Body)
						}
					}
				}
				if evs := rec.take(); len(evs) != 0 || n.protected.Load() != 0 {
					t.Errorf("the engine saw %d requests, the handlers ran %d times; want none", len(evs), n.protected.Load())
				}
			})
		}
	}
}

// TestConformanceBehindPreRewrites runs the conformance suite with Echo's
// Pre rewrites before idem, idem in Use.
func TestConformanceBehindPreRewrites(t *testing.T) {
	conformance.RunHTTP(t, conformance.Harness{NewStore: newMemStore, Handler: func(_ *testing.T, eng *idem.Engine, f *conformance.Fixture) http.Handler {
		e := quietEcho()
		e.Pre(middleware.RemoveTrailingSlash(), middleware.Rewrite(map[string]string{"/v1/*": "/$1"}), middleware.MethodOverride())
		e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}), idemechov5.Middleware(eng, f.GlobalOptions()...))
		for _, rt := range f.Routes() {
			e.Add(rt.Method, rt.ColonPath(), fixtureHandler(rt))
		}
		return e
	}})
}

// TestConformanceInPre runs the conformance suite with idem in Echo.Pre,
// after the Pre rewrites, where Echo has not routed the request yet.
func TestConformanceInPre(t *testing.T) {
	conformance.RunHTTP(t, conformance.Harness{NewStore: newMemStore, Handler: func(_ *testing.T, eng *idem.Engine, f *conformance.Fixture) http.Handler {
		e := quietEcho()
		e.Pre(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}),
			middleware.RemoveTrailingSlash(), middleware.MethodOverride(), idemechov5.Middleware(eng, f.GlobalOptions()...))
		for _, rt := range f.Routes() {
			e.Add(rt.Method, rt.ColonPath(), fixtureHandler(rt))
		}
		return e
	}})
}
