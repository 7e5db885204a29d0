package idemecho_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idemecho "github.com/idemkit/idem/adapters/echo"
	idem "github.com/idemkit/idem/core"
	"github.com/labstack/echo/v4"
)

// events records the engine's events.
type events struct {
	mu  sync.Mutex
	evs []idem.Event
}

func (r *events) observe(_ context.Context, ev idem.Event) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

func (r *events) take() []idem.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	evs := r.evs
	r.evs = nil
	return evs
}

func newEngine(t *testing.T, opts ...idem.Option) (*idem.Engine, *events) {
	t.Helper()
	rec := new(events)
	opts = append([]idem.Option{idem.WithObserver(rec.observe)}, opts...)
	eng, err := idem.New(newMemStore(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return eng, rec
}

func do(h http.Handler, method, target, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func want(t *testing.T, w *httptest.ResponseRecorder, code int, body string, replayed bool) {
	t.Helper()
	if w.Code != code || w.Body.String() != body {
		t.Errorf("got %d %q, want %d %q", w.Code, w.Body.String(), code, body)
	}
	if got := w.Header().Get("Idempotent-Replayed") == "true"; got != replayed {
		t.Errorf("replayed = %v, want %v", got, replayed)
	}
}

// mounting builds an Echo with the routes under prefix, protected by mw in
// one of the ways Echo takes middleware.
type mounting struct {
	name, prefix string
	mount        func(e *echo.Echo, mw echo.MiddlewareFunc) func(method, path string, h echo.HandlerFunc)
}

var mountings = []mounting{
	{"global", "", func(e *echo.Echo, mw echo.MiddlewareFunc) func(string, string, echo.HandlerFunc) {
		e.Use(mw)
		return func(m, p string, h echo.HandlerFunc) { e.Add(m, p, h) }
	}},
	{"route", "", func(e *echo.Echo, mw echo.MiddlewareFunc) func(string, string, echo.HandlerFunc) {
		return func(m, p string, h echo.HandlerFunc) { e.Add(m, p, h, mw) }
	}},
	{"group", "/api", func(e *echo.Echo, mw echo.MiddlewareFunc) func(string, string, echo.HandlerFunc) {
		g := e.Group("/api", mw)
		return func(m, p string, h echo.HandlerFunc) { g.Add(m, p, h) }
	}},
	{"nested group", "/api/v1", func(e *echo.Echo, mw echo.MiddlewareFunc) func(string, string, echo.HandlerFunc) {
		g := e.Group("/api").Group("/v1", mw)
		return func(m, p string, h echo.HandlerFunc) { g.Add(m, p, h) }
	}},
}

// routes mounts a small API; runs counts handler calls.
func routes(add func(method, path string, h echo.HandlerFunc), runs *atomic.Int64) {
	add(http.MethodPost, "/echo", func(c echo.Context) error {
		runs.Add(1)
		b, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		return c.Blob(http.StatusCreated, "text/plain", b)
	})
	add(http.MethodPost, "/items/:id", func(c echo.Context) error {
		runs.Add(1)
		return c.String(http.StatusCreated, "item:"+c.Param("id"))
	})
	add(http.MethodGet, "/counter", func(c echo.Context) error {
		return c.String(http.StatusOK, "count")
	})
}

func TestRouteTemplateScopesKeys(t *testing.T) {
	for _, m := range mountings {
		t.Run(m.name, func(t *testing.T) {
			eng, rec := newEngine(t)
			e := newEcho()
			var runs atomic.Int64
			routes(m.mount(e, idemecho.Middleware(eng)), &runs)
			p := m.prefix

			want(t, do(e, "POST", p+"/items/1", "k", ""), 201, "item:1", false)
			if w := do(e, "POST", p+"/items/2", "k", ""); w.Code != 422 {
				t.Errorf("same key on %s/items/2: %d, want 422 (one scope, two fingerprints)", p, w.Code)
			}
			want(t, do(e, "POST", p+"/echo", "k", ""), 201, "", false)
			want(t, do(e, "POST", p+"/items/1", "k", ""), 201, "item:1", true)
			if n := runs.Load(); n != 2 {
				t.Errorf("handlers ran %d times, want 2", n)
			}
			for _, ev := range rec.take() {
				if ev.Outcome == idem.OutcomeSkipped {
					continue
				}
				if ev.Route != p+"/items/:id" && ev.Route != p+"/echo" {
					t.Errorf("event route %q, want an Echo template under %q", ev.Route, p)
				}
			}
		})
	}
}

func TestHostRouter(t *testing.T) {
	eng, rec := newEngine(t)
	e := newEcho()
	var runs atomic.Int64
	g := e.Host("api.example.com")
	routes(func(m, p string, h echo.HandlerFunc) { g.Add(m, p, h) }, &runs)
	e.Use(idemecho.Middleware(eng))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Host = "api.example.com"
		e.ServeHTTP(w, r)
	})
	want(t, do(h, "POST", "/items/1", "h", ""), 201, "item:1", false)
	want(t, do(h, "POST", "/items/1", "h", ""), 201, "item:1", true)
	if evs := rec.take(); len(evs) != 2 || evs[1].Route != "api.example.com/items/:id" {
		t.Errorf("events %+v, want two on api.example.com/items/:id", evs)
	}
	if w := do(e, "POST", "/items/1", "h", ""); w.Code != 404 { // another host
		t.Errorf("other host: %d, want 404", w.Code)
	}
}

// Unmatched requests get exactly what Echo gives without the middleware,
// whatever their key header holds, and the engine never sees them.
func TestUnmatchedPassThrough(t *testing.T) {
	for _, m := range mountings {
		t.Run(m.name, func(t *testing.T) {
			eng, rec := newEngine(t)
			var runs atomic.Int64
			with, without := newEcho(), newEcho()
			routes(m.mount(with, idemecho.Middleware(eng)), &runs)
			routes(m.mount(without, func(next echo.HandlerFunc) echo.HandlerFunc { return next }), &runs)
			p := m.prefix
			for _, target := range []string{"/nope", p + "/nope", p + "/items", p + "/counter", p + "/echo/x"} {
				for _, key := range []string{`"unterminated`, "", "ok"} {
					got, exp := do(with, "POST", target, key, "x"), do(without, "POST", target, key, "x")
					if got.Code != exp.Code || got.Body.String() != exp.Body.String() || got.Header().Get("Allow") != exp.Header().Get("Allow") {
						t.Errorf("POST %s key %q: %d %q, want Echo's own %d %q", target, key, got.Code, got.Body, exp.Code, exp.Body)
					}
					if got.Code != 404 && got.Code != 405 {
						t.Errorf("POST %s: %d, want 404 or 405", target, got.Code)
					}
				}
			}
			if evs := rec.take(); len(evs) != 0 {
				t.Errorf("the engine saw unmatched requests: %+v", evs)
			}
			if runs.Load() != 0 {
				t.Error("a handler ran")
			}
		})
	}
}

func TestCustomNotFoundRoute(t *testing.T) {
	eng, rec := newEngine(t)
	e := newEcho()
	e.Use(idemecho.Middleware(eng))
	e.RouteNotFound("/*", func(c echo.Context) error { return c.String(http.StatusNotFound, "custom") })
	e.POST("/late", func(c echo.Context) error { return c.String(http.StatusCreated, "late") })
	want(t, do(e, "POST", "/else", `"bad`, ""), 404, "custom", false)
	want(t, do(e, "POST", "/else", "k", ""), 404, "custom", false)
	want(t, do(e, "POST", "/late", "k", ""), 201, "late", false)
	want(t, do(e, "POST", "/late", "k", ""), 201, "late", true)
	// A route added after requests were served is protected at once.
	e.POST("/later/*", func(c echo.Context) error { return c.String(http.StatusCreated, "later") })
	want(t, do(e, "POST", "/later/x", "k", ""), 201, "later", false)
	want(t, do(e, "POST", "/later/x", "k", ""), 201, "later", true)
	// A route added to the router directly, which Echo's route table does
	// not list, is protected too.
	e.Router().Add(http.MethodPost, "/raw", func(c echo.Context) error { return c.String(http.StatusCreated, "raw") })
	want(t, do(e, "POST", "/raw", "k", ""), 201, "raw", false)
	want(t, do(e, "POST", "/raw", "k", ""), 201, "raw", true)
	if n := len(rec.take()); n != 6 {
		t.Errorf("%d events, want 6", n)
	}
}

func TestStatusOnlyResponses(t *testing.T) {
	eng, _ := newEngine(t)
	e := newEcho()
	e.Use(idemecho.Middleware(eng))
	var runs atomic.Int64
	e.POST("/accepted", func(c echo.Context) error { runs.Add(1); return c.NoContent(http.StatusAccepted) })
	e.POST("/nothing", func(c echo.Context) error { runs.Add(1); return nil })
	e.POST("/redirect", func(c echo.Context) error { runs.Add(1); return c.Redirect(http.StatusSeeOther, "/there") })
	for _, tc := range []struct {
		target string
		code   int
	}{{"/accepted", 202}, {"/nothing", 200}, {"/redirect", 303}} {
		want(t, do(e, "POST", tc.target, "s", ""), tc.code, "", false)
		want(t, do(e, "POST", tc.target, "s", ""), tc.code, "", true)
	}
	if w := do(e, "POST", "/redirect", "s", ""); w.Header().Get("Location") != "/there" {
		t.Errorf("replayed Location %q", w.Header().Get("Location"))
	}
	if n := runs.Load(); n != 3 {
		t.Errorf("handlers ran %d times, want 3", n)
	}
}

// outer records what middleware outside the idempotency middleware sees.
type outer struct {
	err       error
	committed bool
	status    int
	size      int64
}

func (o *outer) mw(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		o.err = next(c)
		o.committed, o.status, o.size = c.Response().Committed, c.Response().Status, c.Response().Size
		return o.err
	}
}

func (o *outer) check(t *testing.T, w *httptest.ResponseRecorder, wantErr bool) {
	t.Helper()
	if (o.err != nil) != wantErr {
		t.Errorf("outer middleware got error %v, want one: %v", o.err, wantErr)
	}
	if !wantErr && (!o.committed || o.status != w.Code || o.size != int64(w.Body.Len())) {
		t.Errorf("outer middleware sees committed=%v status=%d size=%d; the client got %d with %d bytes",
			o.committed, o.status, o.size, w.Code, w.Body.Len())
	}
}

func TestErrorPagesAreStoredAndReplayed(t *testing.T) {
	eng, _ := newEngine(t)
	e := newEcho()
	var o outer
	e.Use(o.mw)
	var runs atomic.Int64
	e.POST("/taken", func(c echo.Context) error {
		runs.Add(1)
		return echo.NewHTTPError(http.StatusConflict, "taken")
	}, idemecho.Middleware(eng))
	e.POST("/boom", func(c echo.Context) error { runs.Add(1); return errors.New("boom") }, idemecho.Middleware(eng))
	e.POST("/late-error", func(c echo.Context) error {
		runs.Add(1)
		_ = c.String(http.StatusCreated, "done")
		return errors.New("after the response")
	}, idemecho.Middleware(eng))
	e.POST("/optional", func(c echo.Context) error {
		runs.Add(1)
		return echo.NewHTTPError(http.StatusTeapot, "no key, no protection")
	}, idemecho.Middleware(eng, idem.Optional()))

	page := `{"message":"taken"}` + "\n"
	w := do(e, "POST", "/taken", "t", "")
	want(t, w, 409, page, false)
	o.check(t, w, false)
	w = do(e, "POST", "/taken", "t", "")
	want(t, w, 409, page, true)
	o.check(t, w, false)
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("replayed error page Content-Type %q", ct)
	}

	page = `{"message":"Internal Server Error"}` + "\n"
	w = do(e, "POST", "/boom", "b", "")
	want(t, w, 500, page, false)
	o.check(t, w, false)
	want(t, do(e, "POST", "/boom", "b", ""), 500, page, false) // released: runs again

	want(t, do(e, "POST", "/late-error", "l", ""), 201, "done", false)
	want(t, do(e, "POST", "/late-error", "l", ""), 201, "done", true)

	// Unprotected after all (no key): the error goes up the chain untouched.
	w = do(e, "POST", "/optional", "", "")
	want(t, w, 418, `{"message":"no key, no protection"}`+"\n", false)
	o.check(t, w, true)

	// Answers of the engine itself are seen outside too.
	for _, key := range []string{"", `"bad`} {
		w = do(e, "POST", "/taken", key, "")
		if w.Code != 400 {
			t.Errorf("key %q: %d, want 400", key, w.Code)
		}
		o.check(t, w, false)
	}
	w = do(e, "POST", "/taken?other", "t", "")
	if w.Code != 422 {
		t.Errorf("mismatch: %d, want 422", w.Code)
	}
	o.check(t, w, false)
	if n := runs.Load(); n != 5 {
		t.Errorf("handlers ran %d times, want 5", n)
	}
}

func TestCustomErrorHandler(t *testing.T) {
	eng, _ := newEngine(t)
	e := newEcho()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		if !c.Response().Committed {
			_ = c.String(http.StatusUnprocessableEntity, "custom: "+err.Error())
		}
	}
	e.Use(idemecho.Middleware(eng))
	e.POST("/fail", func(c echo.Context) error { return errors.New("invalid order") })
	want(t, do(e, "POST", "/fail", "f", ""), 422, "custom: invalid order", false)
	want(t, do(e, "POST", "/fail", "f", ""), 422, "custom: invalid order", true)
}

func TestStreamingWithFlush(t *testing.T) {
	eng, _ := newEngine(t)
	e := newEcho()
	var o outer
	e.Use(o.mw, idemecho.Middleware(eng))
	var runs atomic.Int64
	e.POST("/stream", func(c echo.Context) error {
		runs.Add(1)
		c.Response().Header().Set("Content-Type", "text/event-stream")
		c.Response().WriteHeader(http.StatusOK)
		for _, s := range []string{"one\n", "two\n"} {
			if _, err := io.WriteString(c.Response(), s); err != nil {
				return err
			}
			c.Response().Flush()
		}
		return nil
	})
	w := do(e, "POST", "/stream", "s", "")
	want(t, w, 200, "one\ntwo\n", false)
	if !w.Flushed {
		t.Error("the flush did not reach the client")
	}
	o.check(t, w, false)
	w = do(e, "POST", "/stream", "s", "")
	want(t, w, 200, "", true)
	if w.Header().Get(idem.HeaderBodyOmitted) != "true" || w.Header().Get("Content-Type") != "text/event-stream" {
		t.Errorf("replay headers %v, want the status and headers with the body omitted", w.Header())
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// Safe methods pass straight through: no event, no key parsing.
func TestSafeMethodsUntouched(t *testing.T) {
	eng, rec := newEngine(t)
	e := newEcho()
	e.Use(idemecho.Middleware(eng))
	var runs atomic.Int64
	routes(func(m, p string, h echo.HandlerFunc) { e.Add(m, p, h) }, &runs)
	for range 2 {
		want(t, do(e, "GET", "/counter", `"bad`, ""), 200, "count", false)
	}
	if evs := rec.take(); len(evs) != 0 {
		t.Errorf("events for GET: %+v", evs)
	}
}

// TestResponseBeforeWrite checks that a protected handler sees the
// response Echo gives every handler: status 200, nothing written yet.
func TestResponseBeforeWrite(t *testing.T) {
	for _, m := range mountings {
		t.Run(m.name, func(t *testing.T) {
			eng, _ := newEngine(t)
			e := newEcho()
			var status int
			var committed bool
			var size int64
			m.mount(e, idemecho.Middleware(eng))(http.MethodPost, "/s", func(c echo.Context) error {
				r := c.Response()
				status, committed, size = r.Status, r.Committed, r.Size
				return c.String(http.StatusCreated, "ok")
			})
			want(t, do(e, "POST", m.prefix+"/s", "k", ""), 201, "ok", false)
			if status != http.StatusOK || committed || size != 0 {
				t.Errorf("before writing the handler saw status %d committed=%v size=%d, want 200 false 0", status, committed, size)
			}
		})
	}
}

// TestNestedMiddleware checks the middleware mounted globally and again as
// route (or group) middleware: the outer one protects the request, once,
// and its policy applies; the inner one passes through.
func TestNestedMiddleware(t *testing.T) {
	eng, rec := newEngine(t)
	e := newEcho()
	e.Use(idemecho.Middleware(eng))
	var runs atomic.Int64
	h := func(c echo.Context) error { runs.Add(1); return c.String(http.StatusCreated, "made") }
	fail := func(c echo.Context) error {
		runs.Add(1)
		return echo.NewHTTPError(http.StatusConflict, "taken")
	}
	e.POST("/x", h, idemecho.Middleware(eng, idem.TTL(time.Hour)))
	e.POST("/opt", h, idemecho.Middleware(eng, idem.Optional()))
	g := e.Group("/g", idemecho.Middleware(eng))
	g.POST("/y", h, idemecho.Middleware(eng))
	g.POST("/fail", fail, idemecho.Middleware(eng))

	for _, target := range []string{"/x", "/g/y"} {
		runs.Store(0)
		rec.take()
		want(t, do(e, "POST", target, "nested", ""), 201, "made", false)
		want(t, do(e, "POST", target, "nested", ""), 201, "made", true)
		if n := runs.Load(); n != 1 {
			t.Errorf("%s: handler ran %d times, want 1", target, n)
		}
		if n := len(rec.take()); n != 2 {
			t.Errorf("%s: the engine saw %d requests, want 2", target, n)
		}
	}
	// The handler's error, returned through the inner middleware, is the
	// outer one's to answer: Echo's page, stored and replayed.
	runs.Store(0)
	want(t, do(e, "POST", "/g/fail", "nested", ""), 409, `{"message":"taken"}`+"\n", false)
	want(t, do(e, "POST", "/g/fail", "nested", ""), 409, `{"message":"taken"}`+"\n", true)
	if n := runs.Load(); n != 1 {
		t.Errorf("/g/fail: handler ran %d times, want 1", n)
	}
	// The inner middleware's Optional does not apply: the outer one
	// requires a key.
	if w := do(e, "POST", "/opt", "", ""); w.Code != http.StatusBadRequest {
		t.Errorf("no key under the outer policy: %d %q, want 400", w.Code, w.Body)
	}
}

// TestNilOptions checks that nil options, given to the middleware or
// inside idem.ForRoute, are ignored: the other options apply.
func TestNilOptions(t *testing.T) {
	eng, _ := newEngine(t)
	ok := func(c echo.Context) error { return c.String(http.StatusCreated, "ok") }
	e := newEcho()
	e.Use(idemecho.Middleware(eng, nil, idem.ForRoute("POST", "/free", nil, idem.Optional()), nil))
	e.POST("/free", ok)
	e.POST("/strict", ok)
	e2 := newEcho()
	e2.POST("/opt", ok, idemecho.Middleware(eng, nil, idem.Optional()))
	for _, tc := range []struct {
		h           http.Handler
		target, key string
		code        int
		replayed    bool
	}{
		{e, "/free", "", 201, false}, {e, "/strict", "", 400, false}, {e2, "/opt", "", 201, false},
		{e, "/strict", "k", 201, false}, {e, "/strict", "k", 201, true},
	} {
		w := do(tc.h, "POST", tc.target, tc.key, "")
		if got := w.Header().Get("Idempotent-Replayed") == "true"; w.Code != tc.code || got != tc.replayed {
			t.Errorf("POST %s key %q: %d replayed=%v, want %d replayed=%v", tc.target, tc.key, w.Code, got, tc.code, tc.replayed)
		}
	}
}
