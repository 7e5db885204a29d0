package idem

import (
	"net/http"
	"strings"
)

// Middleware returns net/http middleware that protects next with the
// engine's policy and opts.
//
// The route template that scopes keys is, in order: the RouteFunc option's
// answer; when next is itself a *http.ServeMux, the pattern it would match
// (a request it does not match, 404 or 405, passes through untouched); or
// the ServeMux pattern of the request (r.Pattern, set when the middleware
// wraps a handler registered on a ServeMux), without its method. Otherwise the route is empty: keys are scoped by method and
// namespace only.
//
//	mux := http.NewServeMux()
//	mux.Handle("POST /orders", createOrder)
//	http.ListenAndServe(addr, engine.Middleware()(mux))
func (e *Engine) Middleware(opts ...RouteOption) func(http.Handler) http.Handler {
	p := e.Policy(opts...)
	return func(next http.Handler) http.Handler {
		mux, _ := next.(*http.ServeMux)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !e.Protects(r.Method) {
				next.ServeHTTP(w, r)
				return
			}
			var route string
			switch {
			case p.routeFunc != nil:
				route = p.routeFunc(r)
			case mux != nil:
				// The mux this middleware wraps knows the route; an outer
				// mux's pattern (r.Pattern) would only name the mount.
				_, pattern := mux.Handler(r)
				if pattern == "" {
					next.ServeHTTP(w, r)
					return
				}
				route = patternRoute(pattern)
			case r.Pattern != "":
				route = patternRoute(r.Pattern)
			}
			p.Serve(w, r, route, next)
		})
	}
}

// patternRoute strips the method from a ServeMux pattern ("POST /a/{id}").
func patternRoute(pattern string) string {
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		return strings.TrimLeft(pattern[i:], " \t")
	}
	return pattern
}
