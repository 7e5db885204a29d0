package idemecho

import (
	"maps"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"
)

// routeSet tells the routes Echo matched from its not-found routes
// (Echo.RouteNotFound, and the catch-all a group with middleware adds),
// which Echo v4's context cannot: both give c.Path() a template and
// c.Handler() the same closure of Echo's, so only the route table knows.
// A template is a matched route when the table has it for the request's
// method, and when the table names it for no method at all (a route added
// with Router.Add): then the request is protected rather than let through
// (unless a not-found route has the same template: that one passes).
// Echo never removes a route, so a matched triple is remembered and read
// without locks; any other is looked up each time, so a route added later
// is protected from its first request on.
type routeSet struct {
	mu sync.Mutex
	m  atomic.Pointer[map[routeKey]struct{}]
}

type routeKey struct {
	router       *echo.Router
	method, path string
}

func (s *routeSet) matched(e *echo.Echo, r *http.Request, path string) bool {
	router := routerFor(e, r)
	k := routeKey{router, r.Method, path}
	if m := s.m.Load(); m != nil {
		if _, ok := (*m)[k]; ok {
			return true
		}
	}
	notFound := false
	for _, rt := range router.Routes() {
		if rt.Path == path {
			if rt.Method == r.Method {
				notFound = false
				break
			}
			notFound = notFound || rt.Method == echo.RouteNotFound
		}
	}
	if notFound {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := make(map[routeKey]struct{})
	if old := s.m.Load(); old != nil {
		maps.Copy(n, *old)
	}
	n[k] = struct{}{}
	s.m.Store(&n)
	return true
}

// routerFor returns the router Echo routes r with: its Echo.Host router,
// found as Echo finds it, or the default one.
func routerFor(e *echo.Echo, r *http.Request) *echo.Router {
	if hr, ok := e.Routers()[r.Host]; ok {
		return hr
	}
	return e.Router()
}
