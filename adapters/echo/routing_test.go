package idemecho_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	idemecho "github.com/idemkit/idem/adapters/echo"
	idem "github.com/idemkit/idem/core"
	"github.com/labstack/echo/v4"
)

// Where routingCase mounts the middleware.
const (
	styleGlobal = iota // Echo.Use
	styleGroup         // on a group "/g"
	styleRoute         // on each route
	styleHost          // Echo.Use, the routes on the router of host h.example (Echo.Host)
	styles
)

// A routingCase is a set of routes, mounted one way, and requests sent to
// them once the first half of the routes is added and again once all are.
type routingCase struct {
	name  string
	style uint8
	// routes, "|"-separated: a kind and a path. Kinds: P POST, A Any,
	// G GET, N RouteNotFound, R POST added with Router().Add (on a group
	// or per route: POST).
	routes string
	// reqs, "|"-separated: a method (P POST, A PATCH) and a path. In
	// styleHost every other request goes to another host.
	reqs string
}

var routingCases = []routingCase{
	{"404", styleGlobal, "P/orders", "P/nope|P/|P/orders/x"},
	{"405", styleGlobal, "G/orders|P/items/:id", "P/orders|A/items/1"},
	{"not-found route", styleGlobal, "N/*|P/orders", "P/else|P/orders|A/orders"},
	{"not-found route on a parameter", styleGlobal, "N/a/:y|P/a/:x", "A/a/1|P/a/1"},
	{"not-found route on the route's own template", styleGlobal, "N/a/:x|P/a/:x", "A/a/1|P/a/1"},
	{"not-found route with route middleware", styleRoute, "N/*|P/orders", "P/else|P/orders"},
	{"group catch-all", styleGroup, "P/orders|G/counter", "P/g|P/g/|P/g/nope|P/g/orders|P/g/counter|P/orders"},
	{"group catch-all beside a wildcard route", styleGroup, "P/files/*", "P/g/files/a|A/g/files/a|P/g/x"},
	{"group route on the group's own path", styleGroup, "P|P/", "P/g|P/g/|A/g"},
	{"per route", styleRoute, "P/orders|G/orders|A/any", "P/orders|A/orders|A/any|P/nope"},
	{"Any", styleGlobal, "A/any|P/any/:id|A/*", "A/any|P/any|P/any/1|A/any/1|P/x/y"},
	{"the router's own Add", styleGlobal, "R/raw|R/raw/:id", "P/raw|A/raw|P/raw/1"},
	{"routes added later", styleGlobal, "N/*|G/late|P/late|P/later/*", "P/late|P/later/x|A/late"},
	{"routes added later to a group", styleGroup, "G/late|P/late|P/later/:id", "P/g/late|P/g/later/1"},
	{"host router", styleHost, "P/orders|N/*|G/counter", "P/orders|P/orders|P/else|P/else|P/counter|P/counter"},
	{"host router added later", styleHost, "G/a|P/b|P/a", "P/a|P/a|P/b|P/b"},
}

// TestRouting pins the routing edge cases: a request is protected, with
// the template of its route, exactly when it reaches a route with the
// middleware on its way; the router's 404 and 405 and not-found routes
// pass through.
func TestRouting(t *testing.T) {
	for _, c := range routingCases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// FuzzRouting builds Echo routers from fuzzed routes and checks what
// TestRouting checks; routes Echo refuses skip the input.
func FuzzRouting(f *testing.F) {
	for _, c := range routingCases {
		f.Add(c.style, c.routes, c.reqs)
	}
	f.Fuzz(func(t *testing.T, style uint8, routes, reqs string) {
		if len(routes) > 200 || len(reqs) > 200 || strings.Count(routes, "|") > 12 || strings.Count(reqs, "|") > 12 {
			return
		}
		c := routingCase{"fuzz", style % styles, routes, reqs}
		if err := c.check(t); err != nil {
			var refused errRefused
			if errors.As(err, &refused) {
				t.Skip(err)
			}
			t.Fatal(err)
		}
	})
}

type errRefused struct{ error }

const maxParams = 8

// check mounts the routes and sends the requests, comparing the engine's
// events with the route each request reached.
func (c routingCase) check(t *testing.T) error {
	eng, rec := newEngine(t)
	mw := idemecho.Middleware(eng)
	e := newEcho()
	// Echo v4 sizes a context's path values when it makes the context: a
	// route with more parameters added later makes its router panic. A
	// route with maxParams sizes them first.
	e.GET("/_"+strings.Repeat("/:p", maxParams), func(c echo.Context) error { return nil })
	router, prefix := e.Router(), ""
	var g *echo.Group
	switch c.style {
	case styleGlobal:
		e.Use(mw)
	case styleGroup:
		prefix = "/g"
		g = e.Group(prefix, mw)
	case styleHost:
		e.Use(mw)
		g = e.Host("h.example")
		router = e.Routers()["h.example"]
	}

	// Every route has the middleware on its way; reached is the one a
	// request reached: 1 + its index in templates, -1 a not-found route,
	// 0 none.
	reached := 0
	var templates []string
	rawAt, notFoundAt := make(map[string]bool), make(map[string]bool) // templates of R and N routes
	add := func(spec string) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = errRefused{fmt.Errorf("route %q: %v", spec, v)}
			}
		}()
		if spec == "" {
			return nil
		}
		kind, path := spec[0], spec[1:]
		if strings.Count(path, ":")+strings.Count(path, "*") > maxParams {
			return errRefused{fmt.Errorf("route %q: over %d parameters", spec, maxParams)}
		}
		i := len(templates) + 1
		real := func(c echo.Context) error { reached = i; return c.NoContent(http.StatusCreated) }
		notFound := func(c echo.Context) error { reached = -1; return c.NoContent(http.StatusNotFound) }
		var rmw []echo.MiddlewareFunc
		if c.style == styleRoute {
			rmw = append(rmw, mw)
		}
		if kind == 'R' && (c.style == styleRoute || c.style == styleGroup) {
			kind = 'P' // the router's own Add would bypass the middleware
		}
		template := prefix + path
		if !strings.HasPrefix(template, "/") {
			template = "/" + template
		}
		// The one case the adapter cannot tell (see routeSet): a route
		// outside the route table on a not-found route's template.
		switch {
		case kind == 'R' && notFoundAt[template], kind == 'N' && rawAt[template]:
			return errRefused{fmt.Errorf("route %q: Router.Add on a not-found route's template", spec)}
		case kind == 'R':
			rawAt[template] = true
		case kind == 'N':
			notFoundAt[template] = true
		}
		if g != nil {
			switch kind {
			case 'R':
				router.Add(http.MethodPost, path, real)
			case 'P':
				g.POST(path, real)
			case 'A':
				g.Any(path, real)
			case 'G':
				g.GET(path, real)
			case 'N':
				g.RouteNotFound(path, notFound)
			default:
				return errRefused{fmt.Errorf("route %q: no such kind", spec)}
			}
		} else {
			switch kind {
			case 'P':
				e.POST(path, real, rmw...)
			case 'A':
				e.Any(path, real, rmw...)
			case 'G':
				e.GET(path, real, rmw...)
			case 'N':
				e.RouteNotFound(path, notFound, rmw...)
			case 'R':
				router.Add(http.MethodPost, path, real)
			default:
				return errRefused{fmt.Errorf("route %q: no such kind", spec)}
			}
		}
		templates = append(templates, template)
		return nil
	}

	sent := 0
	send := func(i int, spec string) error {
		if spec == "" {
			return nil
		}
		method := map[byte]string{'P': http.MethodPost, 'A': http.MethodPatch}[spec[0]]
		if method == "" {
			return errRefused{fmt.Errorf("request %q: no such method", spec)}
		}
		r := httptest.NewRequest(method, "/", nil)
		r.URL.Path = "/" + strings.TrimPrefix(spec[1:], "/")
		r.Header.Set("Idempotency-Key", fmt.Sprint("k", sent))
		if c.style == styleHost && i%2 == 0 {
			r.Host = "h.example"
		}
		sent++
		reached = 0
		rec.take()
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		evs := rec.take()
		if reached > 0 {
			want := templates[reached-1]
			if _, ok := e.Routers()[r.Host]; ok {
				want = r.Host + want // a host router's route names its host
			}
			if len(evs) != 1 || evs[0].Outcome == idem.OutcomeSkipped || evs[0].Route != want {
				return fmt.Errorf("%s %s reached %s and got %d: events %+v, want it protected on %q", method, r.URL.Path, want, w.Code, evs, want)
			}
		} else if len(evs) != 0 {
			return fmt.Errorf("%s %s reached route %d and got %d: events %+v, want none", method, r.URL.Path, reached, w.Code, evs)
		}
		return nil
	}

	specs, reqs := strings.Split(c.routes, "|"), strings.Split(c.reqs, "|")
	half := (len(specs) + 1) / 2
	for _, phase := range [][]string{specs[:half], specs[half:]} {
		for _, s := range phase {
			if err := add(s); err != nil {
				return err
			}
		}
		for i, s := range reqs {
			if err := send(i, s); err != nil {
				return err
			}
		}
	}
	return nil
}
