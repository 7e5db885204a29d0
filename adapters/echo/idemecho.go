package idemecho

import (
	"net/http"

	idem "github.com/idemkit/idem/core"
	"github.com/labstack/echo/v4"
)

// Middleware returns Echo middleware that protects the routes it wraps
// with e's policy and opts; nil options are ignored. Keys are scoped by
// the template of the route Echo matched (c.Path(), "/orders/:id"),
// wherever the middleware is mounted, and a request Echo does not route
// passes through untouched. A protected
// handler's error is rendered inside, so its page is stored and replayed.
// Build it once, where the router is declared:
//
//	e.Use(idemecho.Middleware(engine, idem.ForRoute("POST", "/search", idem.Optional())))
//
// See the package documentation for mounting styles, middleware order,
// nesting, what passes through, error pages and panics.
func Middleware(e *idem.Engine, opts ...idem.HTTPOption) echo.MiddlewareFunc {
	p := e.Policy(opts...)
	known := new(routeSet)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if !p.Protects(r.Method) {
				return next(c)
			}
			// Echo's router leaves the path empty on a 404 and sets the
			// Allow methods only on a 405 (as middleware.CORS reads them).
			route, routed := c.Path(), c
			if route == "" {
				// A 404, or Echo has not routed r yet (Echo.Pre): ask the
				// router where it routes r as it is now.
				routed = c.Echo().AcquireContext()
				defer c.Echo().ReleaseContext(routed)
				routed.Reset(r, nil)
				routerFor(c.Echo(), r).Find(r.Method, echo.GetPath(r), routed)
				route = routed.Path()
			}
			if route == "" || routed.Get(echo.ContextKeyHeaderAllow) != nil || !known.matched(c.Echo(), r, route) {
				return next(c) // 404, 405 or a not-found route: not ours to answer
			}
			if _, ok := c.Echo().Routers()[r.Host]; ok {
				// An Echo.Host router's route: the same template on
				// another host is another route.
				route = r.Host + route
			}
			resp := c.Response()
			defer func() {
				c.SetRequest(r)
				c.SetResponse(resp)
			}()
			// Serve writes its own answers (replays, problems) and the
			// captured response through resp, so Echo's Committed, Status
			// and Size describe what the client got.
			b := &bridge{c: c, next: next, resp: resp}
			p.Serve(resp, r, route, b)
			return b.err
		}
	}
}

// bridge is the handler Serve runs: the rest of the Echo chain, writing to
// the writer and reading the request that Serve gives it.
type bridge struct {
	c    echo.Context
	next echo.HandlerFunc
	resp *echo.Response // the context's own response
	err  error          // the chain's error when it ran unwrapped
	own  echo.Response  // the handler's response, over Serve's writer
}

func (b *bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := b.c
	c.SetRequest(r) // its body is the one Serve read and replaced
	if rw, ok := w.(*echo.Response); ok && rw == b.resp {
		// Not protected (an optional key that is absent): the chain runs
		// as if the middleware were not there, errors included.
		b.err = b.next(c)
		return
	}
	// The handler gets a Response of its own over w, so its Committed
	// flag follows what it wrote into the capture while the context's
	// response stays unwritten until Serve sends.
	b.own = *echo.NewResponse(w, c.Echo())
	b.own.Status = http.StatusOK // as Echo's own, reset for each request
	c.SetResponse(&b.own)
	if err := b.next(c); err != nil {
		c.Error(err) // the error page is what gets captured
	}
}

// CheckRoutes returns an error wrapping idem.ErrBadOption when an
// idem.ForRoute rule in opts names a route e does not have (a typo would
// leave the real route on the default policy). Call it once the routes
// are declared, with the options given to Middleware:
//
//	if err := idemecho.CheckRoutes(e, opts...); err != nil {
//		log.Fatal(err)
//	}
func CheckRoutes(e *echo.Echo, opts ...idem.HTTPOption) error {
	var routes []idem.RouteRule
	for _, r := range e.Routes() {
		routes = append(routes, idem.RouteRule{Method: r.Method, Route: r.Path})
	}
	return idem.CheckRoutes(routes, opts...)
}
