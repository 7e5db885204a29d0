package idemechov5

import (
	"net/http"

	idem "github.com/idemkit/idem/core"
	"github.com/labstack/echo/v5"
)

// Middleware returns Echo v5 middleware that protects the routes it wraps
// with e's policy and opts; nil options are ignored. Keys are scoped by
// the template of the route Echo matched (c.RouteInfo().Path,
// "/orders/:id"), wherever the middleware is mounted, and a request Echo
// does not route passes through untouched (in Echo.Pre, it gets the
// router's answer there).
// A protected handler's error is rendered inside, so its page is stored
// and replayed. Build it once, where the router is declared:
//
//	e.Use(idemechov5.Middleware(engine, idem.ForRoute("POST", "/search", idem.Optional())))
//
// See the package documentation for mounting styles, nesting, what
// passes through, error pages and panics.
func Middleware(e *idem.Engine, opts ...idem.HTTPOption) echo.MiddlewareFunc {
	p := e.Policy(opts...)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			r, ri := c.Request(), c.RouteInfo()
			if ri.Name == "" && ri.Method == "" && p.Protects(r.Method) {
				// Echo has not routed r yet (Echo.Pre): route it now as it
				// is, and refuse what Echo routes nowhere with the router's
				// own answer, before a later Pre middleware rewrites it.
				h := c.Echo().Router().Route(c)
				if ri = c.RouteInfo(); !matched(ri) {
					return h(c)
				}
			}
			method := ri.Method // the method Echo routed r by
			if method == echo.RouteAny {
				method = r.Method
			}
			if !matched(ri) || !p.Protects(method) {
				return next(c) // the router's 404 or 405, a not-found route, or not protected
			}
			return serve(p, c, next, ri.Path, method)
		}
	}
}

// matched reports whether ri, the RouteInfo Echo's router gave the request,
// names a route of its own: the router's 404 and 405 answers have no
// method, and a not-found route has RouteNotFound for one.
func matched(ri echo.RouteInfo) bool {
	return ri.Method != "" && ri.Method != echo.RouteNotFound
}

func serve(p *idem.Policy, c *echo.Context, next echo.HandlerFunc, route, method string) error {
	r, resp := c.Request(), c.Response()
	defer func() {
		c.SetRequest(r)
		c.SetResponse(resp)
	}()
	b := &bridge{c: c, next: next}
	b.out.ResponseWriter = resp
	if method != r.Method {
		// A middleware changed the method after Echo routed r: the engine
		// judges r as routed, the handler gets it changed.
		b.method = r.Method
		r = withMethod(r, method)
	}
	// Serve writes its own answers (replays, problems) and the captured
	// response through resp, so the *echo.Response under it describes
	// what the client got.
	p.Serve(&b.out, r, route, b)
	return b.err
}

// withMethod returns a shallow copy of r with method m.
func withMethod(r *http.Request, m string) *http.Request {
	r = r.WithContext(r.Context())
	r.Method = m
	return r
}

// bridge is the handler Serve runs: the rest of the Echo chain, reading
// the request and writing to the writer Serve gives it.
type bridge struct {
	c    *echo.Context
	next echo.HandlerFunc
	out  passWriter    // the context's response, as Serve got it
	own  echo.Response // the handler's response, over Serve's writer
	err  error         // the chain's error when it ran unprotected
	// method is the request's method when a middleware changed it after
	// Echo routed the request, else "".
	method string
}

// passWriter is the writer the middleware found in the context, wrapped so
// that ServeHTTP knows it by address when Serve hands it back.
type passWriter struct{ http.ResponseWriter }

// Unwrap lets http.ResponseController and echo.UnwrapResponse through.
func (w *passWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (b *bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := b.c
	if b.method != "" {
		r = withMethod(r, b.method)
	}
	c.SetRequest(r) // its body is the one Serve read and replaced
	if pw, ok := w.(*passWriter); ok && pw == &b.out {
		// Not protected (an optional key that is absent, a skipped
		// route, an outer middleware that protects it): the chain runs
		// as if this middleware were not there, errors included.
		b.err = b.next(c)
		return
	}
	// The handler gets an *echo.Response of its own over w, found first
	// by echo.UnwrapResponse, so its Committed, Status and Size follow
	// what it wrote into the capture while the context's response stays
	// unwritten until Serve sends.
	b.own = *echo.NewResponse(w, c.Logger())
	b.own.Status = http.StatusOK // as Echo's own, reset for each request
	c.SetResponse(&b.own)
	if err := b.next(c); err != nil {
		c.Echo().HTTPErrorHandler(c, err) // the error page is what gets captured
	}
}

// CheckRoutes returns an error wrapping idem.ErrBadOption when an
// idem.ForRoute rule in opts names a route e does not have (a typo would
// leave the real route on the default policy). Call it once the routes
// are declared, with the options given to Middleware:
//
//	if err := idemechov5.CheckRoutes(e, opts...); err != nil {
//		log.Fatal(err)
//	}
func CheckRoutes(e *echo.Echo, opts ...idem.HTTPOption) error {
	var routes []idem.RouteRule
	for _, r := range e.Router().Routes() {
		routes = append(routes, idem.RouteRule{Method: r.Method, Route: r.Path})
	}
	return idem.CheckRoutes(routes, opts...)
}
