package idem

import (
	"sort"
	"strings"
	"time"
)

// RouteRule names a route that ForRoute gives options to.
type RouteRule struct {
	Method string // upper case, as ForRoute stores it
	Route  string // the route template, in the router's own syntax
}

// RouteRules returns the routes that opts give options to with ForRoute,
// sorted, for adapters that check them against their router: a rule for
// a route the router does not have is a typo that leaves the real route
// on the default policy. ForRoute rules nested in ForRoute are not
// listed (they never apply).
func RouteRules(opts ...HTTPOption) []RouteRule {
	p := Policy{h: &httpConfig{}}
	for _, o := range opts {
		if o != nil {
			o.applyHTTP(&p)
		}
	}
	rules := make([]RouteRule, 0, len(p.overrides))
	for k := range p.overrides {
		rules = append(rules, RouteRule{k.method, k.route})
	}
	sort.Slice(rules, func(i, j int) bool {
		if rules[i].Route != rules[j].Route {
			return rules[i].Route < rules[j].Route
		}
		return rules[i].Method < rules[j].Method
	})
	return rules
}

// CheckRoutes reports, as an error wrapping ErrBadOption, the ForRoute
// rules in opts that name none of routes: the routes a router has, which
// each adapter's CheckRoutes lists.
func CheckRoutes(routes []RouteRule, opts ...HTTPOption) error {
	have := make(map[RouteRule]bool, len(routes))
	for _, r := range routes {
		have[RouteRule{strings.ToUpper(r.Method), r.Route}] = true
	}
	var missing []string
	for _, r := range RouteRules(opts...) {
		if !have[r] {
			missing = append(missing, r.Method+" "+r.Route)
		}
	}
	if len(missing) > 0 {
		return badOption("ForRoute names routes the router does not have: %s", strings.Join(missing, ", "))
	}
	return nil
}

// A RouteOption sets what a policy decides for the routes or methods one
// middleware or interceptor protects: whether a key is required, whether
// they are protected at all, and how long their results are kept. HTTP
// and gRPC take them; ForRoute applies them to one route.
type RouteOption func(*Policy)

func (o RouteOption) applyHTTP(p *Policy) {
	if o != nil {
		o(p)
	}
}

// Required makes the key required on these routes (400 without one).
// It is the default; inside ForRoute it overrides an Optional given to
// the whole middleware.
func Required() RouteOption { return func(p *Policy) { p.required = true } }

// Optional makes the key optional on these routes: a request without one
// runs unprotected (OutcomeSkipped). Given to the middleware itself it
// applies to every route it protects, and ForRoute can require the key
// on some.
func Optional() RouteOption { return func(p *Policy) { p.required = false } }

// TTL sets the retention of responses stored on these routes, from one
// millisecond to MaxLifetime. TTL panics with an error wrapping
// ErrBadOption for a value outside that range: like a bad pattern given
// to http.ServeMux, it is a mistake in the program, caught where the
// routes are declared.
func TTL(d time.Duration) RouteOption {
	if d < time.Millisecond || d > MaxLifetime {
		panic(badOption("TTL %v is not between 1ms and %v", d, MaxLifetime))
	}
	return func(p *Policy) { p.retention = d }
}

// Skip makes these routes pass through untouched, as if the middleware
// were not there (health checks, webhooks with their own deduplication).
func Skip() RouteOption { return func(p *Policy) { p.skip = true } }

// ForRoute applies opts only to requests whose method and route template
// match, for middleware mounted once at the top of a router:
//
//	r.Use(idemchi.Middleware(engine,
//		idem.ForRoute("POST", "/search", idem.Optional()),
//		idem.ForRoute("POST", "/webhooks/{source}", idem.Skip()),
//	))
//
// The route is written in the router's own syntax ("/orders/:id" for Gin
// and Echo, "/orders/{id}" for Chi and ServeMux).
//
// ForRoute panics with an error wrapping ErrBadOption when method is empty
// or route does not start with "/": such a rule could never match.
func ForRoute(method, route string, opts ...RouteOption) RouteOption {
	if method == "" || !strings.HasPrefix(route, "/") {
		panic(badOption("ForRoute(%q, %q): want a method and a route template starting with /", method, route))
	}
	return func(p *Policy) {
		if p.overrides == nil {
			p.overrides = make(map[routeKey][]RouteOption)
		}
		k := routeKey{strings.ToUpper(method), route}
		p.overrides[k] = append(p.overrides[k], opts...)
	}
}

type routeKey struct{ method, route string }
