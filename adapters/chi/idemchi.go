package idemchi

import (
	"net/http"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
	idem "github.com/idemkit/idem/core"
)

// Middleware returns chi middleware that protects the routes behind it with
// e's policy and opts. Build it once where the router, group or route is
// declared; it works in every place chi takes middleware:
//
//	r.Use(idemchi.Middleware(e))                                  // the whole router
//	r.With(idemchi.Middleware(e, idem.Optional())).Post(...)      // one route
//	r.Group(func(r chi.Router) { r.Use(idemchi.Middleware(e)) })  // a group
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

// lookups holds the scratch routing contexts for route look-ups, so that a
// look-up allocates nothing once warm.
var lookups = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// routeTemplate returns the full route template chi routes r to and true,
// or false when chi routes r nowhere (404, 405).
//
// It asks the root router (rctx.Routes) with a fresh routing context, which
// works before the handler runs (top-level r.Use) as well as after (r.With,
// r.Group) and inside sub-routers, where the patterns matched so far
// (rctx.RoutePatterns) are only part of the template. The path is the one
// chi routes by: rctx.RoutePath when set, else the escaped URL path. Inside
// a mounted sub-router chi has shifted rctx.RoutePath to the sub-router's
// part of the path, so while the answer does not extend the patterns
// already matched, the look-up is repeated with the URL path, then with
// the path the mounts matched so far joined to rctx.RoutePath (which finds
// paths rewritten before routing, as by middleware.StripSlashes).
//
// chi's Find counts the bare mount point of a sub-router ("/api" for
// r.Mount("/api", sub)) as matched even when sub has no "/" route, so such
// a request is protected although chi then answers 404.
func routeTemplate(r *http.Request) (string, bool) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		// Not under a chi router: scope by method and namespace only.
		return "", true
	}
	method := rctx.RouteMethod
	if method == "" {
		method = r.Method
	}
	urlPath := r.URL.RawPath
	if urlPath == "" {
		urlPath = r.URL.Path
	}
	if urlPath == "" {
		urlPath = "/"
	}
	path := rctx.RoutePath
	if path == "" {
		path = urlPath
	}
	known := rctx.RoutePatterns

	tctx := lookups.Get().(*chi.Context)
	defer lookups.Put(tctx)
	find := func(path string) (string, bool) {
		tctx.Reset()
		p := rctx.Routes.Find(tctx, method, path)
		return normalize(p), p != "" && extends(tctx.RoutePatterns, known)
	}
	route, ok := find(path)
	if ok || len(known) == 0 {
		return route, ok
	}
	if path != urlPath {
		if route, ok = find(urlPath); ok {
			return route, true
		}
	}
	if rctx.RoutePath != "" {
		mounts := mountPaths(known, rctx.URLParams.Values)
		for i := len(mounts) - 1; i >= 0; i-- {
			if route, ok = find(mounts[i] + rctx.RoutePath); ok {
				return route, true
			}
		}
	}
	if !strings.HasSuffix(known[len(known)-1], "*") {
		// Inline middleware after chi matched a route: the patterns so
		// far are the whole template.
		return rctx.RoutePattern(), true
	}
	// In front of a sub-router that does not route the rest of the path.
	return "", false
}

// mountPaths returns, for each leading pattern of known that mounts a
// sub-router ("/api/*"), the concrete path it and the patterns before it
// matched ("/api"), with values (the URL parameter values of known, in
// order) filled in.
func mountPaths(known, values []string) []string {
	var out []string
	prefix := ""
	for _, p := range known {
		if !strings.HasSuffix(p, "/*") {
			break
		}
		var b strings.Builder
		b.WriteString(prefix)
		for i := 0; i < len(p); i++ {
			switch p[i] {
			case '{': // a parameter, perhaps with a regexp holding braces
				depth, j := 0, i
				for ; j < len(p); j++ {
					if p[j] == '{' {
						depth++
					} else if p[j] == '}' {
						if depth--; depth == 0 {
							break
						}
					}
				}
				if j == len(p) || len(values) == 0 {
					return out
				}
				b.WriteString(values[0])
				values, i = values[1:], j
			case '*':
				if len(values) == 0 {
					return out
				}
				values = values[1:]
			default:
				b.WriteByte(p[i])
			}
		}
		prefix = strings.TrimSuffix(b.String(), "/")
		out = append(out, prefix)
	}
	return out
}

// extends reports whether patterns starts with known.
func extends(patterns, known []string) bool {
	if len(patterns) < len(known) {
		return false
	}
	for i, k := range known {
		if patterns[i] != k {
			return false
		}
	}
	return true
}

// normalize writes a template as chi's Context.RoutePattern does: no "/*/"
// joins between a mount and its sub-router, no trailing slash.
func normalize(p string) string {
	for strings.Contains(p, "/*/") {
		p = strings.ReplaceAll(p, "/*/", "/")
	}
	if p != "/" {
		p = strings.TrimSuffix(p, "//")
		p = strings.TrimSuffix(p, "/")
	}
	return p
}
