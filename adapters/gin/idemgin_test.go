package idemgin_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idem/adapters/gin"
	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

func init() { gin.SetMode(gin.ReleaseMode) }

func newStore(t *testing.T) idem.Store {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	return s
}

// recovery is Gin's own recovery middleware, quiet in tests.
func recovery() gin.HandlerFunc { return gin.RecoveryWithWriter(io.Discard) }

func fixtureHandler(rt conformance.Route) gin.HandlerFunc {
	return func(c *gin.Context) { rt.Handler(c.Writer, c.Request, c.Param) }
}

// globalRouter mounts the middleware once at the top of the router.
func globalRouter(_ *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.Use(recovery(), idemgin.Middleware(e, f.GlobalOptions()...))
	for _, rt := range f.Routes() {
		r.Handle(rt.Method, rt.ColonPath(), fixtureHandler(rt))
	}
	return r
}

// routeRouter mounts the middleware in each protected route's chain, with
// the route's options.
func routeRouter(_ *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
	r := gin.New()
	r.Use(recovery())
	for _, rt := range f.Routes() {
		if rt.Protected {
			r.Handle(rt.Method, rt.ColonPath(), idemgin.Middleware(e, rt.Options...), fixtureHandler(rt))
		} else {
			r.Handle(rt.Method, rt.ColonPath(), fixtureHandler(rt))
		}
	}
	return r
}

func TestConformanceGlobal(t *testing.T) {
	conformance.RunHTTP(t, conformance.Harness{NewStore: newStore, Handler: globalRouter})
}

func TestConformancePerRoute(t *testing.T) {
	conformance.RunHTTP(t, conformance.Harness{NewStore: newStore, Handler: routeRouter})
}

// events records the engine's events.
type events struct {
	mu  sync.Mutex
	all []idem.Event
}

func (ev *events) observe(_ context.Context, e idem.Event) {
	ev.mu.Lock()
	ev.all = append(ev.all, e)
	ev.mu.Unlock()
}

func (ev *events) last(t *testing.T) idem.Event {
	t.Helper()
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if len(ev.all) == 0 {
		t.Fatal("the engine saw no request")
	}
	return ev.all[len(ev.all)-1]
}

func (ev *events) count() int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return len(ev.all)
}

func newEngine(t *testing.T, opts ...idem.Option) (*idem.Engine, *events) {
	t.Helper()
	ev := &events{}
	opts = append([]idem.Option{idem.WithObserver(ev.observe)}, opts...)
	e, err := idem.New(newStore(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e, ev
}

func send(h http.Handler, method, target, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func replayed(w *httptest.ResponseRecorder) bool {
	return w.Header().Get("Idempotent-Replayed") == "true"
}

// mount is one way to put the middleware in front of the handlers; every
// route it declares is under prefix.
type mount struct {
	name   string
	prefix string
	build  func(mw gin.HandlerFunc, routes func(gin.IRoutes)) *gin.Engine
}

var mounts = []mount{
	{"global", "", func(mw gin.HandlerFunc, routes func(gin.IRoutes)) *gin.Engine {
		r := gin.New()
		r.HandleMethodNotAllowed = true
		r.Use(recovery(), mw)
		routes(r)
		return r
	}},
	{"group", "/api", func(mw gin.HandlerFunc, routes func(gin.IRoutes)) *gin.Engine {
		r := gin.New()
		r.HandleMethodNotAllowed = true
		r.Use(recovery())
		routes(r.Group("/api", mw))
		return r
	}},
	{"route", "", func(mw gin.HandlerFunc, routes func(gin.IRoutes)) *gin.Engine {
		r := gin.New()
		r.HandleMethodNotAllowed = true
		r.Use(recovery())
		routes(&withMiddleware{r, mw})
		return r
	}},
}

// withMiddleware declares routes with mw first in each handler chain.
type withMiddleware struct {
	*gin.Engine
	mw gin.HandlerFunc
}

func (m *withMiddleware) POST(path string, h ...gin.HandlerFunc) gin.IRoutes {
	return m.Engine.POST(path, append([]gin.HandlerFunc{m.mw}, h...)...)
}

func (m *withMiddleware) GET(path string, h ...gin.HandlerFunc) gin.IRoutes {
	return m.Engine.GET(path, append([]gin.HandlerFunc{m.mw}, h...)...)
}

func TestMountingStyles(t *testing.T) {
	for _, m := range mounts {
		t.Run(m.name, func(t *testing.T) {
			e, ev := newEngine(t)
			var runs int
			router := m.build(idemgin.Middleware(e), func(r gin.IRoutes) {
				r.POST("/items/:id", func(c *gin.Context) { runs++; c.String(201, "item:"+c.Param("id")) })
				r.POST("/echo", func(c *gin.Context) { runs++; b, _ := io.ReadAll(c.Request.Body); c.Data(201, "text/plain", b) })
				r.POST("/files/*path", func(c *gin.Context) { runs++; c.String(200, c.Param("path")) })
				r.GET("/items/:id", func(c *gin.Context) { c.String(200, "get") })
			})
			p := m.prefix

			t.Run("route template", func(t *testing.T) {
				for _, tc := range []struct{ target, route string }{
					{"/items/7", "/items/:id"},
					{"/echo", "/echo"},
					{"/files/a/b.txt", "/files/*path"},
				} {
					send(router, "POST", p+tc.target, "tmpl-"+tc.target, "")
					if got := ev.last(t); got.Route != p+tc.route || got.Outcome != idem.OutcomeExecuted {
						t.Errorf("POST %s: route %q outcome %q, want %q executed", tc.target, got.Route, got.Outcome, p+tc.route)
					}
				}
			})
			t.Run("same key, same template, other path is 422", func(t *testing.T) {
				runs = 0
				if w := send(router, "POST", p+"/items/1", "k422", ""); w.Code != 201 || w.Body.String() != "item:1" {
					t.Fatalf("first: %d %q", w.Code, w.Body)
				}
				if w := send(router, "POST", p+"/items/2", "k422", ""); w.Code != 422 {
					t.Fatalf("other path: %d %q, want 422", w.Code, w.Body)
				}
				if w := send(router, "POST", p+"/items/1", "k422", ""); w.Code != 201 || !replayed(w) {
					t.Fatalf("retry: %d replayed=%v", w.Code, replayed(w))
				}
				if runs != 1 {
					t.Errorf("handler ran %d times, want 1", runs)
				}
			})
			t.Run("same key, two routes, both run", func(t *testing.T) {
				runs = 0
				if w := send(router, "POST", p+"/echo", "two", ""); w.Code != 201 || replayed(w) {
					t.Fatalf("/echo: %d replayed=%v", w.Code, replayed(w))
				}
				if w := send(router, "POST", p+"/items/1", "two", ""); w.Code != 201 || replayed(w) || w.Body.String() != "item:1" {
					t.Fatalf("/items/1: %d %q replayed=%v", w.Code, w.Body, replayed(w))
				}
				if runs != 2 {
					t.Errorf("handlers ran %d times, want 2", runs)
				}
			})
			t.Run("unmatched routes are untouched", func(t *testing.T) {
				n := ev.count()
				w := send(router, "POST", p+"/nope", `"bad`, "")
				if w.Code != 404 || w.Body.String() != "404 page not found" {
					t.Errorf("404: %d %q", w.Code, w.Body)
				}
				w = send(router, "PATCH", p+"/items/1", `"bad`, "")
				if w.Code != 405 || w.Body.String() != "405 method not allowed" || w.Header().Get("Allow") == "" {
					t.Errorf("405: %d %q Allow=%q", w.Code, w.Body, w.Header().Get("Allow"))
				}
				w = send(router, "GET", p+"/items/1", `"bad`, "")
				if w.Code != 200 || w.Body.String() != "get" {
					t.Errorf("GET: %d %q", w.Code, w.Body)
				}
				if ev.count() != n {
					t.Errorf("the engine saw %d unmatched or safe requests", ev.count()-n)
				}
			})
		})
	}
}

func TestNoRouteHandlerUntouched(t *testing.T) {
	e, _ := newEngine(t)
	r := gin.New()
	r.Use(idemgin.Middleware(e))
	r.NoRoute(func(c *gin.Context) { c.JSON(404, gin.H{"error": "not here"}) })
	r.POST("/x", func(c *gin.Context) { c.Status(201) })
	for range 2 {
		w := send(r, "POST", "/missing", "k", "")
		if w.Code != 404 || w.Body.String() != `{"error":"not here"}` || replayed(w) {
			t.Errorf("NoRoute: %d %q replayed=%v", w.Code, w.Body, replayed(w))
		}
	}
}

// TestChainAndContext checks what the middleware does to the Gin context:
// the request and writer are restored, a short-circuited chain is aborted
// and written, and the handler reads the body the client sent.
func TestChainAndContext(t *testing.T) {
	e, _ := newEngine(t)
	type seen struct {
		aborted, written, sameReq, sameWriter bool
		status                                int
	}
	var outer seen
	var inner int
	r := gin.New()
	r.Use(func(c *gin.Context) {
		req, wr := c.Request, c.Writer
		c.Next()
		outer = seen{c.IsAborted(), c.Writer.Written(), c.Request == req, c.Writer == wr, c.Writer.Status()}
	})
	r.POST("/orders", idemgin.Middleware(e), func(c *gin.Context) {
		var in struct{ Item string }
		if err := c.ShouldBindJSON(&in); err != nil {
			c.AbortWithStatusJSON(400, gin.H{"error": err.Error()})
			return
		}
		c.Next()
		c.JSON(201, gin.H{"item": in.Item})
	}, func(c *gin.Context) { inner++ })

	w := send(r, "POST", "/orders", "o1", `{"item":"tea"}`)
	if w.Code != 201 || w.Body.String() != `{"item":"tea"}` {
		t.Fatalf("first: %d %q", w.Code, w.Body)
	}
	if want := (seen{false, true, true, true, 201}); outer != want {
		t.Errorf("after the first request the outer middleware saw %+v, want %+v", outer, want)
	}
	for _, tc := range []struct {
		body string
		code int
	}{{`{"item":"tea"}`, 201}, {`{"item":"cake"}`, 422}} {
		outer = seen{}
		w = send(r, "POST", "/orders", "o1", tc.body)
		if w.Code != tc.code {
			t.Fatalf("retry %s: %d %q, want %d", tc.body, w.Code, w.Body, tc.code)
		}
		if want := (seen{true, true, true, true, tc.code}); outer != want {
			t.Errorf("after retry %s the outer middleware saw %+v, want %+v", tc.body, outer, want)
		}
	}
	if inner != 1 {
		t.Errorf("the last handler ran %d times, want 1", inner)
	}
}

// TestPanic checks that Gin's recovery, mounted first, answers a panic with
// 500 on the real writer and that the key is released.
func TestPanic(t *testing.T) {
	for _, m := range mounts {
		t.Run(m.name, func(t *testing.T) {
			e, ev := newEngine(t)
			runs := 0
			r := m.build(idemgin.Middleware(e), func(r gin.IRoutes) {
				r.POST("/boom", func(c *gin.Context) {
					runs++
					c.String(201, "partial")
					panic("boom")
				})
			})
			for range 2 {
				w := send(r, "POST", m.prefix+"/boom", "p", "")
				if w.Code != 500 || w.Body.Len() != 0 {
					t.Errorf("panic: %d %q, want recovery's bare 500", w.Code, w.Body)
				}
				if o := ev.last(t).Outcome; o != idem.OutcomeReleased {
					t.Errorf("outcome %q, want released", o)
				}
			}
			if runs != 2 {
				t.Errorf("handler ran %d times, want 2", runs)
			}
		})
	}
}

// TestRouteOptions checks options given per route and by ForRoute.
func TestRouteOptions(t *testing.T) {
	e, _ := newEngine(t)
	ok := func(c *gin.Context) { c.String(201, "ok") }
	r := gin.New()
	r.Use(idemgin.Middleware(e,
		idem.ForRoute("POST", "/search/:q", idem.Optional()),
		idem.ForRoute("POST", "/hook", idem.Skip()),
	))
	r.POST("/search/:q", ok)
	r.POST("/hook", ok)
	r.POST("/strict", ok)
	r2 := gin.New()
	r2.POST("/opt", idemgin.Middleware(e, idem.Optional()), ok)
	r2.POST("/skip", idemgin.Middleware(e, idem.Skip()), ok)
	for _, tc := range []struct {
		h      http.Handler
		target string
		key    string
		code   int
	}{
		{r, "/search/x", "", 201},
		{r, "/hook", "", 201},
		{r, "/hook", `"bad`, 201},
		{r, "/strict", "", 400},
		{r2, "/opt", "", 201},
		{r2, "/skip", `"bad`, 201},
	} {
		if w := send(tc.h, "POST", tc.target, tc.key, ""); w.Code != tc.code {
			t.Errorf("POST %s key %q: %d %q, want %d", tc.target, tc.key, w.Code, w.Body, tc.code)
		}
	}
}

// TestNestedMiddleware checks the middleware mounted globally and again on
// a route: the outer one protects the request, once, and its policy
// applies; the inner one passes through.
func TestNestedMiddleware(t *testing.T) {
	e, ev := newEngine(t)
	runs := 0
	h := func(c *gin.Context) { runs++; c.String(http.StatusCreated, "made") }
	r := gin.New()
	r.Use(recovery(), idemgin.Middleware(e))
	r.POST("/x", idemgin.Middleware(e, idem.TTL(time.Hour)), h)
	r.POST("/opt", idemgin.Middleware(e, idem.Optional()), h)
	for i := range 2 {
		w := send(r, "POST", "/x", "nested", "")
		if w.Code != http.StatusCreated || w.Body.String() != "made" || replayed(w) != (i == 1) {
			t.Errorf("request %d: %d %q replayed=%v", i, w.Code, w.Body, replayed(w))
		}
	}
	if runs != 1 {
		t.Errorf("handler ran %d times, want 1", runs)
	}
	if n := ev.count(); n != 2 {
		t.Errorf("the engine saw %d requests, want 2", n)
	}
	// The inner middleware's Optional does not apply: the outer one
	// requires a key.
	if w := send(r, "POST", "/opt", "", ""); w.Code != http.StatusBadRequest {
		t.Errorf("no key under the outer policy: %d %q, want 400", w.Code, w.Body)
	}
}

// TestNilOptions checks that nil options, given to the middleware or
// inside idem.ForRoute, are ignored: the other options apply.
func TestNilOptions(t *testing.T) {
	e, _ := newEngine(t)
	ok := func(c *gin.Context) { c.String(201, "ok") }
	r := gin.New()
	r.Use(idemgin.Middleware(e, nil, idem.ForRoute("POST", "/free", nil, idem.Optional()), nil))
	r.POST("/free", ok)
	r.POST("/strict", ok)
	r2 := gin.New()
	r2.POST("/opt", idemgin.Middleware(e, nil, idem.Optional()), ok)
	for _, tc := range []struct {
		h           http.Handler
		target, key string
		code        int
		replayed    bool
	}{
		{r, "/free", "", 201, false}, {r, "/strict", "", 400, false}, {r2, "/opt", "", 201, false},
		{r, "/strict", "k", 201, false}, {r, "/strict", "k", 201, true},
	} {
		if w := send(tc.h, "POST", tc.target, tc.key, ""); w.Code != tc.code || replayed(w) != tc.replayed {
			t.Errorf("POST %s key %q: %d replayed=%v, want %d replayed=%v", tc.target, tc.key, w.Code, replayed(w), tc.code, tc.replayed)
		}
	}
}
