package idemchi

import (
	"net/http"

	idem "github.com/idemkit/idem/core"
)

// Middleware returns chi middleware that protects the routes behind it with
// e's policy and opts. Build it once where the router, group or route is
// declared; it works in every place chi takes middleware. Mount it once on
// the way to each route: for the whole router, with per-route options by
// template in idem.ForRoute,
//
//	r.Use(idemchi.Middleware(e, idem.ForRoute("POST", "/search", idem.Optional())))
//
// or, on a router without that, per route and group:
//
//	r.With(idemchi.Middleware(e, idem.Optional())).Post("/search", search)
//	r.Group(func(r chi.Router) { r.Use(idemchi.Middleware(e)); r.Post("/orders", create) })
//
// A middleware behind one that already protects the request passes it
// through: the outer one's policy applies, the inner one's options do not.
//
// Keys are scoped by the full chi route template of the request
// ("/api/orders/{id}"), the same string in every mounting style. A request
// that chi does not route (404, 405) passes through untouched. Requests with
// a method the engine does not protect go to the engine's skip path without
// a route look-up.
func Middleware(e *idem.Engine, opts ...idem.RouteOption) func(http.Handler) http.Handler {
	p := e.Policy(opts...)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !e.Protects(r.Method) {
				p.Serve(w, r, "", next)
				return
			}
			route, ok := routeTemplate(r)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			p.Serve(w, r, route, next)
		})
	}
}
