package idemchi

import (
	"cmp"
	"net/http"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
)

// A resolver finds the template of the route chi routes a request to by
// chi's own answers: RoutePattern once chi has routed it, Find before,
// and Routes to tell the sub-routers chi goes into from routes.
type resolver struct {
	mounts sync.Map // mountKey → the sub-router mounted there, or nil for a route
}

type mountKey struct {
	level           chi.Routes
	pattern, method string
}

var scratch = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// route returns the template chi routes r to by method, as chi's
// RoutePattern writes it, and true. When chi routes r nowhere, it answers
// w as the router would (404 or 405) and returns false.
func (s *resolver) route(w http.ResponseWriter, r *http.Request, rctx *chi.Context, method string) (string, bool) {
	known := rctx.RoutePatterns
	level := s.descend(rctx.Routes, known, method)
	if level == nil {
		return rctx.RoutePattern(), true // chi has routed r (inline middleware)
	}
	// chi has gone into level (the root, a sub-router) and will route by
	// path there, unless a later middleware rewrites it.
	path := cmp.Or(rctx.RoutePath, "/") // shifted by chi's mount handler
	keys, vals := rctx.URLParams.Keys, rctx.URLParams.Values
	switch n := len(keys) - 1; {
	case len(known) == 0:
		path = cmp.Or(rctx.RoutePath, r.URL.RawPath, r.URL.Path, "/") // as chi's routeHTTP takes it
	case !strings.HasSuffix(known[len(known)-1], "*"):
		path = "/" // a bare mount point ("/api" for r.Mount("/api", sub)), where sub routes "/"
	case n >= 0 && n < len(vals) && keys[n] == "*" && (vals[n] != "" || r.PathValue("*") == ""):
		// r.With before r.Mount: chi's mount handler has yet to shift the
		// path and clear the "*" value (but not r.PathValue) as it does.
		path = "/" + vals[n]
	}
	pats, at, ok := s.find(level, method, path, known)
	if !ok {
		s.refuse(w, r, level, path, method, at)
		return "", false
	}
	c := chi.Context{RoutePatterns: pats}
	return c.RoutePattern(), true
}

// find asks level where it routes path for method, going on into the
// sub-router at a bare mount point with "/" as chi does. It returns pats
// and chi's patterns on the way, and true; or false and the deepest
// router on the way, whose handlers answer the request.
func (s *resolver) find(level chi.Routes, method, path string, pats []string) ([]string, chi.Routes, bool) {
	tctx := scratch.Get().(*chi.Context)
	defer scratch.Put(tctx)
	pats = pats[:len(pats):len(pats)] // append copies: pats may be the request's
	for range 16 {
		tctx.Reset()
		found := level.Find(tctx, method, path) != ""
		pats = append(pats, tctx.RoutePatterns...)
		sub := s.descend(level, tctx.RoutePatterns, method)
		switch {
		case !found:
			return nil, cmp.Or(sub, level), false
		case sub == nil:
			return pats, nil, true
		}
		level, path = sub, "/"
	}
	return nil, level, false
}

// descend follows patterns, chi's from level on, down the sub-routers
// mounted at them. It returns the router the last one leads into (level
// for none), or nil when the last one is a route.
func (s *resolver) descend(level chi.Routes, patterns []string, method string) chi.Routes {
	for _, p := range patterns {
		if level = s.mounted(level, p, method); level == nil {
			return nil
		}
	}
	return level
}

// mounted returns the sub-router chi goes into at pattern in level for
// method, or nil when pattern is a route of level. At a bare mount point
// chi's pattern is a stub that Routes hides, with the sub-router at
// "/api/*" for "/api" or "/api/", unless the stub's pattern has a route
// of its own for the method.
func (s *resolver) mounted(level chi.Routes, pattern, method string) chi.Routes {
	k := mountKey{level, pattern, method}
	if v, ok := s.mounts.Load(k); ok {
		sub, _ := v.(chi.Routes)
		return sub
	}
	wild := pattern
	if !strings.HasSuffix(pattern, "*") {
		wild = strings.TrimSuffix(pattern, "/") + "/*"
	}
	var sub chi.Routes
	for _, rt := range level.Routes() {
		if rt.Pattern == pattern && wild != pattern && (rt.Handlers[method] != nil || rt.Handlers["*"] != nil) {
			sub = nil
			break
		}
		if rt.Pattern == wild {
			sub = rt.SubRoutes
		}
	}
	s.mounts.Store(k, sub)
	return sub
}

// refuse answers a request that level routes nowhere (by path) as chi
// does: with the MethodNotAllowed handler of at, the deepest router on
// its way, when path routes for other methods, else its NotFound
// handler. chi's own 405 handler writes Allow only from arguments of a
// type chi does not export, so Allow is set here, before any handler.
func (s *resolver) refuse(w http.ResponseWriter, r *http.Request, level chi.Routes, path, method string, at chi.Routes) {
	mx, ok := at.(*chi.Mux)
	if !ok {
		mx = chi.NewMux() // with chi's default handlers
	}
	h := mx.NotFoundHandler()
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE", "QUERY"} {
		if m == method {
			continue
		}
		if _, _, ok := s.find(level, m, path, nil); ok {
			w.Header().Add("Allow", m)
			h = mx.MethodNotAllowedHandler()
		}
	}
	h.ServeHTTP(w, r)
}
