package idemchi

import (
	"cmp"
	"net/http"

	"github.com/go-chi/chi/v5"
	idem "github.com/idemkit/idem/core"
)

// Middleware returns chi middleware that protects the routes behind it
// with e's policy and opts, keys scoped by the full template of the route
// chi routes the request to. Build it once, where the router is declared:
//
//	r.Use(idemchi.Middleware(engine, idem.ForRoute("POST", "/search", idem.Optional())))
//
// See the package documentation for mounting styles and middleware order.
func Middleware(e *idem.Engine, opts ...idem.HTTPOption) func(http.Handler) http.Handler {
	p := e.Policy(opts...)
	var res resolver
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rctx := chi.RouteContext(r.Context())
			if rctx == nil || rctx.Routes == nil {
				p.Serve(w, r, "", next) // not under a chi router: scope by method and namespace only
				return
			}
			// chi routes by rctx.RouteMethod once set: it has routed r,
			// or a middleware before this one (GetHead) chose it.
			method := cmp.Or(rctx.RouteMethod, r.Method)
			if !p.Protects(method) {
				// chi routes r by the method judged here, whatever a
				// later middleware makes of r.Method.
				rctx.RouteMethod = method
				next.ServeHTTP(w, r)
				return
			}
			route, ok := res.route(w, r, rctx, method)
			switch {
			case !ok: // refused with the router's 404 or 405
			case r.Method != method:
				// A middleware changed the method after chi routed r: the
				// engine judges r as routed, the handler gets it changed.
				p.Serve(w, withMethod(r, method), route, http.HandlerFunc(func(w http.ResponseWriter, rr *http.Request) {
					next.ServeHTTP(w, withMethod(rr, r.Method))
				}))
			default:
				p.Serve(w, r, route, next)
			}
		})
	}
}

// withMethod returns a shallow copy of r with method m.
func withMethod(r *http.Request, m string) *http.Request {
	r = r.WithContext(r.Context())
	r.Method = m
	return r
}

// CheckRoutes returns an error wrapping idem.ErrBadOption when an
// idem.ForRoute rule in opts names a route r does not have (a typo would
// leave the real route on the default policy), as chi.Walk lists them.
// Call it once the routes are declared, with the options given to
// Middleware:
//
//	if err := idemchi.CheckRoutes(r, opts...); err != nil {
//		log.Fatal(err)
//	}
func CheckRoutes(r chi.Routes, opts ...idem.HTTPOption) error {
	var routes []idem.RouteRule
	err := chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, idem.RouteRule{Method: method, Route: route})
		return nil
	})
	if err != nil {
		return err
	}
	return idem.CheckRoutes(routes, opts...)
}
