package idem

import (
	"sort"
	"strings"
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
func RouteRules(opts ...RouteOption) []RouteRule {
	var p Policy
	for _, o := range opts {
		if o != nil {
			o(&p)
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
func CheckRoutes(routes []RouteRule, opts ...RouteOption) error {
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
