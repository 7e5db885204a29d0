package idem

import (
	"net/http"
	"reflect"
	"strings"
)

// Middleware returns net/http middleware that protects next with the
// engine and opts: HTTPOptions such as WithKeyHeader or WithNamespace, and
// RouteOptions such as Optional or ForRoute. It panics as Policy does.
//
// The route template that scopes keys is, in order: the RouteFunc option's
// answer; when next is itself a *http.ServeMux, the pattern it would match
// (a request it does not match, 404 or 405, or one it redirects, passes
// through untouched), after the pattern of an outer ServeMux that mounted
// it under a prefix StripPrefix removed ("/v1/ /orders"); or the ServeMux
// pattern of the request
// (r.Pattern, set when the middleware wraps a handler registered on a
// ServeMux), without its method.
// Otherwise the route is empty: keys are scoped by method and namespace
// only.
//
// A handler that rewrites the path or the method belongs before this
// middleware, so that the mux it wraps is asked about the request as it
// will be routed. Between this middleware and the mux, a path rewrite
// hides the mux: every request with a protected method is protected,
// scoped by method and namespace only; a method override there could turn
// a GET this middleware let through into a POST, and must not be used.
// Behind a ServeMux, the request is judged by the method of the pattern
// the mux routed it by, whatever a handler in between made of r.Method.
//
//	mux := http.NewServeMux()
//	mux.Handle("POST /orders", createOrder)
//	http.ListenAndServe(addr, engine.Middleware()(mux))
func (e *Engine) Middleware(opts ...HTTPOption) func(http.Handler) http.Handler {
	p := e.Policy(opts...)
	return func(next http.Handler) http.Handler {
		mux, _ := next.(*http.ServeMux)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Behind a ServeMux (r.Pattern set), the method the mux
			// routed r by is the pattern's, whatever r.Method is now.
			method, route := patternRoute(r.Method, r.Pattern)
			if !p.Protects(method) {
				next.ServeHTTP(w, r)
				return
			}
			switch {
			case p.h.routeFunc != nil:
				route = p.h.routeFunc(r)
			case mux != nil:
				// The mux this middleware wraps knows the route. Its own
				// redirects (a trailing slash, a path to clean) are not
				// routes: the client follows them, key and all.
				h, pattern := mux.Handler(r)
				if pattern == "" || reflect.TypeOf(h) == redirectType {
					next.ServeHTTP(w, r)
					return
				}
				_, inner := patternRoute(method, pattern)
				if mount := mountPath(route); mount != "" && inner != mount && !strings.HasPrefix(inner, mount+"/") {
					// An outer mux mounted this one under a prefix that
					// StripPrefix took off the path: the mount keeps two
					// mounted muxes' routes apart. A route that carries
					// its mount already (no StripPrefix, or a mount at
					// "/") is named as it always was.
					inner = route + " " + inner
				}
				route = inner
			}
			if method != r.Method {
				// A handler changed the method after the mux routed r: the
				// engine judges r as routed, next gets it changed.
				changed, routed := r.Method, r.WithContext(r.Context())
				routed.Method = method
				p.serve(w, routed, route, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					r = r.WithContext(r.Context())
					r.Method = changed
					next.ServeHTTP(w, r)
				}))
				return
			}
			p.serve(w, r, route, next)
		})
	}
}

// mountPath is the path of an outer ServeMux's pattern route, without
// its host and its trailing slash: "" for a mount at the root of its host.
func mountPath(route string) string {
	if i := strings.IndexByte(route, '/'); i > 0 {
		route = route[i:] // "example.com/v1/": the host names no path
	}
	return strings.TrimSuffix(route, "/")
}

// redirectType is the type of the handler a ServeMux answers its own
// redirects with.
var redirectType = reflect.TypeOf(http.RedirectHandler("/", http.StatusTemporaryRedirect))

// patternRoute splits a ServeMux pattern ("POST /a/{id}") into its method,
// or method when it has none, and its route.
func patternRoute(method, pattern string) (string, string) {
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		return pattern[:i], strings.TrimLeft(pattern[i:], " \t")
	}
	return method, pattern
}
