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
// part of the path, so the look-up is also made with the URL path, and
// with the path the mounts matched so far joined to rctx.RoutePath (which
// finds paths rewritten before routing, as by middleware.StripSlashes),
// that one first when chi is known to have entered the sub-router. An
// answer counts only when it extends the patterns and URL parameters chi
// has matched so far.
//
// chi's Find stops at the bare mount point of a sub-router ("/api" for
// r.Mount("/api", sub)), where chi's routing goes on into sub with the
// path "/". Looked up before routing (top-level r.Use), such a request is
// protected even when sub has no "/" route and chi then answers 404, and
// its template is the mount point's ("/api") even when sub routes "/"
// with a catch-all, which chi's RoutePattern writes "/api/*". Below the
// mount point (in sub, or after routing), the look-up goes on into sub.
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
		if p == "" {
			return "", false
		}
		if !extends(tctx.RoutePatterns, known) || !sameParams(tctx.URLParams, rctx.URLParams) {
			// Find stops at the bare mount point of a sub-router ("/api"
			// or "/api/" for r.Mount("/api", sub)), where chi's routing
			// goes on into sub with the path "/": go on when the
			// middleware runs below that point.
			if len(tctx.RoutePatterns) >= len(known) || !extends(known, tctx.RoutePatterns) ||
				!descend(rctx.Routes, tctx, method) || !extends(tctx.RoutePatterns, known) ||
				!sameParams(tctx.URLParams, rctx.URLParams) {
				return "", false
			}
			p = strings.Join(tctx.RoutePatterns, "")
		}
		return normalize(p), true
	}
	if len(known) == 0 {
		return find(path)
	}
	// The path the mounts matched so far joined to rctx.RoutePath, deepest
	// mount first.
	mounted := func() (string, bool) {
		if rctx.RoutePath == "" {
			return "", false
		}
		mounts := mountPaths(known, rctx.URLParams.Values)
		for i := len(mounts) - 1; i >= 0; i-- {
			if route, ok := find(mounts[i] + rctx.RoutePath); ok {
				return route, true
			}
		}
		return "", false
	}
	// Below a mount (chi's mount handler has cleared the value of its
	// "*"), rctx.RoutePath is the sub-router's part of the path. A look-up
	// of that part from the root can match some other route, so the URL
	// path comes first when it ends with that part (nothing rewrote it),
	// then the path rebuilt from the mounts.
	below := strings.HasSuffix(known[len(known)-1], "/*") && clearedWildcard(rctx.URLParams)
	triedURL := false
	if below {
		if strings.HasSuffix(urlPath, rctx.RoutePath) {
			triedURL = true
			if route, ok := find(urlPath); ok {
				return route, true
			}
		}
		if route, ok := mounted(); ok {
			return route, true
		}
	}
	if route, ok := find(path); ok {
		return route, true
	}
	if path != urlPath && !triedURL {
		if route, ok := find(urlPath); ok {
			return route, true
		}
	}
	if !below {
		if route, ok := mounted(); ok {
			return route, true
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

// descend continues a look-up by routes that ended at the bare mount point
// of a sub-router (the last of tctx.RoutePatterns) into that sub-router,
// with the path "/", as chi's routing does. It reports whether the
// sub-router routes that path.
func descend(routes chi.Routes, tctx *chi.Context, method string) bool {
	pats := tctx.RoutePatterns
	for i, p := range pats {
		if i == len(pats)-1 {
			p = strings.TrimSuffix(p, "/") + "/*"
		}
		var sub chi.Routes
		for _, rt := range routes.Routes() {
			if rt.Pattern == p {
				sub = rt.SubRoutes
				break
			}
		}
		if sub == nil {
			return false
		}
		routes = sub
	}
	return routes.Find(tctx, method, "/") != ""
}

// mountPaths returns, for each leading pattern of known that mounts a
// sub-router ("/api/*", or a bare mount point such as "/api/" that more
// patterns follow), the concrete path it and the patterns before it
// matched ("/api"), with values (the URL parameter values of known, in
// order) filled in.
func mountPaths(known, values []string) []string {
	var out []string
	prefix := ""
	for i, p := range known {
		if !strings.HasSuffix(p, "/*") && i == len(known)-1 {
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

// clearedWildcard reports whether the last URL parameter chi matched is a
// "*" with no value, as chi's mount handler leaves it for the sub-router.
func clearedWildcard(p chi.RouteParams) bool {
	n := len(p.Keys) - 1
	return n >= 0 && p.Keys[n] == "*" && n < len(p.Values) && p.Values[n] == ""
}

// sameParams reports whether a look-up matched the URL parameters chi has
// matched so far (known), with the same values: a path relative to a
// sub-router can also match from the root, through the same patterns with
// other values ("/orders/7" as /{tenant}=orders/{id}=7 where chi routed
// /acme/orders/7). Values of "*" are not compared: chi's mount handler
// clears them.
func sameParams(found, known chi.RouteParams) bool {
	if len(found.Keys) < len(known.Keys) || len(found.Values) < len(known.Values) {
		return false
	}
	for i, k := range known.Keys {
		if found.Keys[i] != k || k != "*" && i < len(known.Values) && found.Values[i] != known.Values[i] {
			return false
		}
	}
	return true
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
