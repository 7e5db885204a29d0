package idemchi

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
)

// lookups holds the scratch routing contexts for route look-ups, so that a
// look-up allocates nothing once warm.
var lookups = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// routeTemplate returns the route template chi routes r to, as chi's
// RoutePattern writes it, and true; or false when chi routes r nowhere
// (404, 405).
//
// It asks chi's Find on the root router (rctx.Routes), with a fresh
// routing context, for the path the root routes by. Find descends into
// mounted sub-routers, and answers before routing (a top-level r.Use) as
// well as after (r.With, r.Group, a sub-router's r.Use), when an answer
// counts only if it extends the patterns and URL parameters chi has
// matched so far.
func routeTemplate(r *http.Request) (string, bool) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return "", true // not under a chi router: scope by method and namespace only
	}
	l := lookup{rctx: rctx, method: cmp.Or(rctx.RouteMethod, r.Method), tctx: lookups.Get().(*chi.Context)}
	defer lookups.Put(l.tctx)
	urlPath := cmp.Or(r.URL.RawPath, r.URL.Path, "/") // as chi's routeHTTP takes it
	path := cmp.Or(rctx.RoutePath, urlPath)
	known := rctx.RoutePatterns
	if len(known) == 0 {
		return l.find(path)
	}
	// The patterns before the last are mounts chi has entered; the last
	// is a route, or a mount chi may have entered.
	mounts := known[:len(known)-1]
	if entered(r, rctx) {
		mounts = known
	}
	if len(mounts) > 0 {
		path = rootPath(mounts, rctx.URLParams.Values, rctx.RoutePath, urlPath)
	}
	if route, ok := l.find(path); ok {
		return route, true
	}
	if !strings.HasSuffix(known[len(known)-1], "*") {
		// After chi matched a route (inline middleware), the patterns so
		// far are the template, even where a middleware has rewritten
		// RoutePath since.
		return rctx.RoutePattern(), true
	}
	return "", false // in front of a sub-router that does not route the rest
}

// entered reports whether chi has entered the sub-router mounted where
// the last of rctx.RoutePatterns matched. chi's mount handler sets
// rctx.RoutePath to what is left, "/" at a bare mount point ("/api" for
// r.Mount("/api", sub)) or for an empty value of the mount's "*", which it
// clears in rctx.URLParams (not in r.PathValue). A value that was empty
// already leaves rctx.RoutePath, if set, ending in "/".
func entered(r *http.Request, rctx *chi.Context) bool {
	keys, values, rest := rctx.URLParams.Keys, rctx.URLParams.Values, rctx.RoutePath
	if !strings.HasSuffix(rctx.RoutePatterns[len(rctx.RoutePatterns)-1], "/*") {
		return rest == "/"
	}
	n := len(keys) - 1
	if n < 0 || keys[n] != "*" || n >= len(values) || values[n] != "" || rest == "" {
		return false
	}
	return rest == "/" || !strings.HasSuffix(rest, "/") || r.PathValue("*") != ""
}

// A lookup asks the root router where a path goes, for a request chi may
// have routed part of the way.
type lookup struct {
	rctx   *chi.Context // the request's
	method string
	tctx   *chi.Context // scratch
}

// find returns the template chi's Find gives path from the root, when it
// extends the patterns and URL parameters chi has matched so far.
func (l *lookup) find(path string) (string, bool) {
	known, tctx := l.rctx.RoutePatterns, l.tctx
	tctx.Reset()
	p := ""
	if path != "" {
		p = l.rctx.Routes.Find(tctx, l.method, path)
	}
	if p == "" {
		return "", false
	}
	if len(tctx.RoutePatterns) < len(known) && extends(known, tctx.RoutePatterns) {
		if !descend(l.rctx.Routes, tctx, l.method) {
			return "", false
		}
		p = tctx.RoutePattern()
	}
	if !extends(tctx.RoutePatterns, known) || !sameParams(tctx.URLParams, l.rctx.URLParams) {
		return "", false
	}
	return normalize(p), true
}

// rootPath returns the path from the root that leads chi's Find through
// mounts, patterns of sub-routers chi has entered, with values (the URL
// parameter values, in order) filled in, and on with rest in the deepest;
// "" when the values do not fit.
//
// chi keeps no path from the root: its mount handler shifts
// rctx.RoutePath (rest) to the part a sub-router routes, and clears the
// value of the mount's "*".
func rootPath(mounts, values []string, rest, urlPath string) string {
	w := pathWriter{url: urlPath}
	for _, p := range mounts {
		wild := strings.HasSuffix(p, "/*")
		if wild {
			p = p[:len(p)-2] // rest begins with the mount's "/"
		}
		for i := 0; i < len(p); i++ {
			if p[i] != '{' {
				continue
			}
			// A parameter, perhaps with a regexp holding braces.
			depth, end := 0, -1
			for j := i; j < len(p) && end < 0; j++ {
				switch p[j] {
				case '{':
					depth++
				case '}':
					if depth--; depth == 0 {
						end = j
					}
				}
			}
			if end < 0 || len(values) == 0 {
				return ""
			}
			w.add(p[:i])
			w.add(values[0])
			p, values, i = p[end+1:], values[1:], -1
		}
		w.add(p)
		if !wild {
			// The bare mount point of a sub-router ("/api" for
			// r.Mount("/api", sub)): chi routes "/" in sub from here,
			// where its Find stops and find descends.
			return w.String()
		}
		if len(values) == 0 || values[0] != "" {
			return "" // not a mount chi has entered: it clears the value of "*"
		}
		values = values[1:]
	}
	w.add(rest)
	return w.String()
}

// pathWriter builds a path, without a copy while it is a prefix of url.
type pathWriter struct {
	url string
	n   int    // the length of the path, while it is url[:n]
	b   []byte // the path, once it is not
}

func (w *pathWriter) add(s string) {
	switch {
	case w.b == nil && strings.HasPrefix(w.url[w.n:], s):
		w.n += len(s)
	case w.b == nil:
		w.b = append(append(make([]byte, 0, w.n+len(s)+32), w.url[:w.n]...), s...)
	default:
		w.b = append(w.b, s...)
	}
}

func (w *pathWriter) String() string {
	if w.b == nil {
		return w.url[:w.n]
	}
	return string(w.b)
}

// descend continues a look-up that ended at the bare mount point of a
// sub-router (the last of tctx.RoutePatterns) into that sub-router with
// the path "/", as chi's routing does, and reports whether it routes
// there. chi's Find cannot: the bare mount point's node holds no
// sub-router, so the walk goes through Routes().
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

// sameParams reports whether a look-up matched the URL parameters chi has
// matched so far (known), with the same values but for the "*" values
// that chi's mount handler cleared.
func sameParams(found, known chi.RouteParams) bool {
	if len(found.Keys) < len(known.Keys) || len(found.Values) < len(known.Values) {
		return false
	}
	for i, k := range known.Keys {
		if found.Keys[i] != k || i < len(known.Values) && found.Values[i] != known.Values[i] && !(k == "*" && known.Values[i] == "") {
			return false
		}
	}
	return true
}

// extends reports whether patterns starts with known.
func extends(patterns, known []string) bool {
	return len(patterns) >= len(known) && slices.Equal(patterns[:len(known)], known)
}

// normalize writes a template as chi's Context.RoutePattern does: no "/*/"
// joins between a mount and its sub-router, no trailing slash. (Find's
// answer needs this; RoutePattern would join and allocate again.)
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
