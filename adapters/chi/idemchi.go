package idemchi

import (
	"net/http"

	idem "github.com/idemkit/idem/core"
)

// Middleware returns chi middleware that protects the routes behind it
// with e's policy and opts; nil options are ignored. Keys are scoped by
// the full template of the route chi matches ("/api/orders/{id}"),
// wherever the middleware is mounted, and a request chi does not route
// passes through untouched. Build it once, where the router is declared:
//
//	r.Use(idemchi.Middleware(engine, idem.ForRoute("POST", "/search", idem.Optional())))
//
// See the package documentation for mounting styles, nesting, what
// passes through, and panics.
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
