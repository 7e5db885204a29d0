package idemecho_test

import (
	"io"
	"net/http"
	"testing"

	idemecho "github.com/idemkit/idem/adapters/echo"
	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

func newMemStore(t *testing.T) idem.Store {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	return s
}

// newEcho returns an Echo with its panic recovery outermost, quiet.
func newEcho() *echo.Echo {
	e := echo.New()
	e.Logger.SetOutput(io.Discard)
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}))
	return e
}

func fixtureHandler(rt conformance.Route) echo.HandlerFunc {
	return func(c echo.Context) error {
		rt.Handler(c.Response(), c.Request(), c.Param)
		return nil
	}
}

// mountGlobal mounts the middleware once, with e.Use, before any route.
func mountGlobal(_ *testing.T, eng *idem.Engine, f *conformance.Fixture) http.Handler {
	e := newEcho()
	e.Use(idemecho.Middleware(eng, f.GlobalOptions()...))
	for _, rt := range f.Routes() {
		e.Add(rt.Method, rt.ColonPath(), fixtureHandler(rt))
	}
	return e
}

// mountPerRoute gives each protected route its own middleware with its own
// options; /reset has none.
func mountPerRoute(_ *testing.T, eng *idem.Engine, f *conformance.Fixture) http.Handler {
	e := newEcho()
	for _, rt := range f.Routes() {
		var mw []echo.MiddlewareFunc
		if rt.Protected {
			mw = append(mw, idemecho.Middleware(eng, rt.Options...))
		}
		e.Add(rt.Method, rt.ColonPath(), fixtureHandler(rt), mw...)
	}
	return e
}

// mountGroup puts the routes without options in a group that carries the
// middleware (the group's catch-all not-found route then runs it too), and
// the others on the router with route middleware.
func mountGroup(_ *testing.T, eng *idem.Engine, f *conformance.Fixture) http.Handler {
	e := newEcho()
	base := f.HTTPOptions()
	g := e.Group("", idemecho.Middleware(eng, base...))
	for _, rt := range f.Routes() {
		switch {
		case !rt.Protected:
			e.Add(rt.Method, rt.ColonPath(), fixtureHandler(rt))
		case len(rt.Options) > len(base):
			e.Add(rt.Method, rt.ColonPath(), fixtureHandler(rt), idemecho.Middleware(eng, rt.Options...))
		default:
			g.Add(rt.Method, rt.ColonPath(), fixtureHandler(rt))
		}
	}
	return e
}

func TestConformanceGlobal(t *testing.T) {
	conformance.RunHTTP(t, conformance.Harness{NewStore: newMemStore, Handler: mountGlobal})
}

func TestConformancePerRoute(t *testing.T) {
	conformance.RunHTTP(t, conformance.Harness{NewStore: newMemStore, Handler: mountPerRoute})
}

func TestConformanceGroup(t *testing.T) {
	conformance.RunHTTP(t, conformance.Harness{NewStore: newMemStore, Handler: mountGroup})
}
