package idemgin_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idem/adapters/gin"
	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
)

// methodOverride sets the method from X-HTTP-Method-Override, for any
// method: the most a method override can do. Gin routes before its
// middleware runs, so it changes the method, not the route.
func methodOverride(c *gin.Context) {
	if m := c.GetHeader("X-HTTP-Method-Override"); m != "" {
		c.Request.Method = m
	}
}

// A variant is a request that a router option or a middleware may route
// to a protected handler.
type variant struct{ method, target, override string }

// A stack is the router options and middleware around idem.
type stack struct {
	name     string
	options  func(r *gin.Engine)
	before   []gin.HandlerFunc // Use'd before idem
	after    []gin.HandlerFunc // Use'd after idem
	variants []variant
	// unsupported says why idem cannot hold in this stack: it is
	// documented, and the case is skipped.
	unsupported string
}

var (
	slashes   = []variant{{"POST", "/orders/7/", ""}, {"POST", "/orders/", ""}}
	extra     = []variant{{"POST", "//orders//7", ""}, {"POST", "/orders//7/", ""}}
	raw       = []variant{{"POST", "/orders/a%2Fb", ""}, {"POST", "/orders/%37", ""}}
	overrides = []variant{{"GET", "/orders/7", "POST"}, {"POST", "/orders/7", "PUT"}, {"GET", "/orders/7", "PATCH"}}
	logger    = gin.LoggerWithWriter(io.Discard)
)

var stacks = []stack{
	{"RedirectTrailingSlash", func(r *gin.Engine) { r.RedirectTrailingSlash = true }, nil, nil, slashes, ""},
	{"no RedirectTrailingSlash", func(r *gin.Engine) { r.RedirectTrailingSlash = false }, nil, nil, slashes, ""},
	{"RedirectFixedPath", func(r *gin.Engine) { r.RedirectFixedPath = true }, nil, nil, append(slices.Clone(extra), variant{"POST", "/ORDERS/7", ""}), ""},
	{"RemoveExtraSlash", func(r *gin.Engine) { r.RemoveExtraSlash = true }, nil, nil, extra, ""},
	{"UseRawPath", func(r *gin.Engine) { r.UseRawPath = true }, nil, nil, raw, ""},
	{"UseRawPath, UnescapePathValues off", func(r *gin.Engine) { r.UseRawPath, r.UnescapePathValues = true, false }, nil, nil, raw, ""},
	{"UseEscapedPath", func(r *gin.Engine) { r.UseEscapedPath = true }, nil, nil, raw, ""},
	{"recovery and logger before idem", nil, []gin.HandlerFunc{recovery(), logger}, nil, nil, ""},
	{"logger after idem", nil, nil, []gin.HandlerFunc{logger}, nil, ""},
	{"method override before idem", nil, []gin.HandlerFunc{methodOverride}, nil, overrides,
		"Gin tells middleware no method it routed by: a POST turned into a PUT after routing reaches the POST handler unprotected (see the package documentation)"},
	{"method override after idem", nil, nil, []gin.HandlerFunc{methodOverride}, overrides, ""},
}

// ginCounts are the runs of the protected and the other handlers.
type ginCounts struct{ protected, other atomic.Int64 }

// placements are where idem goes: the whole engine, a group, each route.
var placements = []struct {
	name   string
	prefix string
	build  func(s stack, mw gin.HandlerFunc, n *ginCounts) *gin.Engine
}{
	{"Use", "", func(s stack, mw gin.HandlerFunc, n *ginCounts) *gin.Engine {
		r := newRouter(s)
		r.Use(chain(s, mw)...)
		orderRoutes(r, n, nil)
		return r
	}},
	{"Group", "/api", func(s stack, mw gin.HandlerFunc, n *ginCounts) *gin.Engine {
		r := newRouter(s)
		orderRoutes(r.Group("/api", chain(s, mw)...), n, nil)
		return r
	}},
	{"route", "", func(s stack, mw gin.HandlerFunc, n *ginCounts) *gin.Engine {
		r := newRouter(s)
		orderRoutes(r, n, chain(s, mw))
		return r
	}},
}

func newRouter(s stack) *gin.Engine {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	if s.options != nil {
		s.options(r)
	}
	return r
}

// chain is the stack's middleware around mw (nil: none).
func chain(s stack, mw gin.HandlerFunc) []gin.HandlerFunc {
	out := slices.Clone(s.before)
	if mw != nil {
		out = append(out, mw)
	}
	return append(out, s.after...)
}

// orderRoutes declares POST /orders, POST and PATCH /orders/:id
// (protected), and GET and PUT /orders/:id (not), behind mws.
func orderRoutes(r gin.IRoutes, n *ginCounts, mws []gin.HandlerFunc) {
	prot := func(c *gin.Context) {
		n.protected.Add(1)
		c.String(http.StatusCreated, "made %s %s", c.FullPath(), c.Param("id"))
	}
	other := func(c *gin.Context) {
		n.other.Add(1)
		c.String(http.StatusOK, "other")
	}
	r.POST("/orders", append(slices.Clone(mws), prot)...)
	r.POST("/orders/:id", append(slices.Clone(mws), prot)...)
	r.PATCH("/orders/:id", append(slices.Clone(mws), prot)...)
	r.GET("/orders/:id", append(slices.Clone(mws), other)...)
	r.PUT("/orders/:id", append(slices.Clone(mws), other)...)
}

func sendVariant(h http.Handler, v variant, target, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(v.method, "/", strings.NewReader(`{"n":1}`))
	r.URL.Path, r.URL.RawPath = target, ""
	if strings.Contains(target, "%") {
		r.URL.RawPath = target
		r.URL.Path = strings.NewReplacer("%2F", "/", "%37", "7").Replace(target)
	}
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

// TestRewritingOptions is the middleware-order matrix of issue 16 on Gin:
// each path option of Gin's router and each middleware, before and after
// idem, with idem on the engine, a group or a route. Whatever the order,
// a protected handler never runs without a key, runs once for a key sent
// twice, and a request Gin routes to it is served.
func TestRewritingOptions(t *testing.T) {
	for _, pl := range placements {
		for _, s := range stacks {
			t.Run(pl.name+"/"+s.name, func(t *testing.T) {
				if s.unsupported != "" {
					t.Skip(s.unsupported)
				}
				vs := append([]variant{{"POST", "/orders/7", ""}, {"PATCH", "/orders/7", ""}}, s.variants...)
				for _, v := range vs {
					e, _ := newEngine(t)
					n := new(ginCounts)
					h := pl.build(s, idemgin.Middleware(e), n)
					target := pl.prefix + v.target
					if strings.HasPrefix(v.target, "//") {
						target = "//" + strings.TrimPrefix(pl.prefix, "/") + v.target[1:]
					}
					noKey := sendVariant(h, v, target, "")
					if n.protected.Load() != 0 {
						t.Errorf("%s %s (override %q), no key: %d %q: the protected handler ran unprotected", v.method, target, v.override, noKey.Code, noKey.Body)
						continue
					}
					first := sendVariant(h, v, target, "k")
					second := sendVariant(h, v, target, "k")
					switch ran := n.protected.Load(); {
					case ran > 1:
						t.Errorf("%s %s (override %q) twice with one key: the protected handler ran %d times", v.method, target, v.override, ran)
					case ran == 1 && noKey.Code != http.StatusBadRequest:
						t.Errorf("%s %s (override %q), no key: %d, want 400", v.method, target, v.override, noKey.Code)
					case ran == 1 && (first.Code != 201 || second.Code != 201 || !replayed(second)):
						t.Errorf("%s %s (override %q): %d %q then %d replayed=%v, want 201 and a replay", v.method, target, v.override, first.Code, first.Body, second.Code, replayed(second))
					case ran == 0 && v.override == "" && first.Code != 301 && first.Code != 307 && first.Code != 308 && first.Code != 404:
						t.Errorf("%s %s: %d %q, want it served protected, redirected or not found", v.method, target, first.Code, first.Body)
					}
				}
			})
		}
	}
}

// TestRewritingOptionsUnmatched checks that a request Gin routes nowhere
// gets Gin's own 404, 405 or redirect whatever its key, with every option.
func TestRewritingOptionsUnmatched(t *testing.T) {
	for _, pl := range placements {
		for _, s := range stacks {
			t.Run(pl.name+"/"+s.name, func(t *testing.T) {
				e, ev := newEngine(t)
				n := new(ginCounts)
				h := pl.build(s, idemgin.Middleware(e), n)
				bare := pl.build(s, nil, new(ginCounts))
				for _, v := range []variant{{"POST", "/nope", ""}, {"PATCH", "/orders", ""}, {"POST", "/orders/7/x", ""}, {"DELETE", "/orders/7", ""}} {
					target := pl.prefix + v.target
					for _, key := range []string{"", "k", "a,b"} {
						got, want := sendVariant(h, v, target, key), sendVariant(bare, v, target, key)
						if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Allow") != want.Header().Get("Allow") {
							t.Errorf("%s %s key %q: %d %q, want Gin's %d %q", v.method, target, key, got.Code, got.Body, want.Code, want.Body)
						}
					}
				}
				if ev.count() != 0 || n.protected.Load() != 0 {
					t.Errorf("the engine saw %d requests, the handlers ran %d times; want none", ev.count(), n.protected.Load())
				}
			})
		}
	}
}

// TestConformanceRouterOptions runs the conformance suite on an engine
// with Gin's path options on and a logger after idem.
func TestConformanceRouterOptions(t *testing.T) {
	conformance.RunHTTP(t, conformance.Harness{NewStore: newStore, Handler: func(_ *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
		r := gin.New()
		r.HandleMethodNotAllowed = true
		r.RedirectTrailingSlash, r.RedirectFixedPath, r.RemoveExtraSlash, r.UseRawPath = true, true, true, true
		r.Use(recovery(), idemgin.Middleware(e, f.GlobalOptions()...), logger)
		for _, rt := range f.Routes() {
			r.Handle(rt.Method, rt.ColonPath(), fixtureHandler(rt))
		}
		return r
	}})
}
