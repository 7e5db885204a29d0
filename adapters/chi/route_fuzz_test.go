package idemchi

import (
	"cmp"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// Where FuzzRouteTemplate puts the probe that resolves the template.
const (
	probeTopUse     = iota // r.Use on the root router, before routing
	probeWith              // r.With on the route itself
	probeInnerUse          // r.Use in the innermost sub-router
	probeWithMount         // r.With before the first Mount
	probeMountedUse        // r.Use in the router mounted first
	probeStyles
)

// routeCorpus is the seed corpus: nested mounts and routes, as patterns
// joined by "|" (each but the last is a sub-router mounted there), with
// the probe's place and options.
var routeCorpus = []struct {
	spec  string
	style uint8
	flags uint8  // 1: decoy routes, 2: StripSlashes and a trailing slash, 4: Mount instead of Route, 8: a catch-all decoy in every router
	vals  string // parameter values, "42,7,x" when empty
}{
	{"/orders/{id}", probeTopUse, 0, ""},
	{"/orders/{id}", probeWith, 0, ""},
	{"/", probeTopUse, 0, ""},
	{"/api|/orders/{id}", probeTopUse, 0, ""},
	{"/api|/orders/{id}", probeWith, 1, ""},
	{"/api|/orders/{id}", probeInnerUse, 4, ""},
	{"/api|/orders/{id}", probeWithMount, 0, ""},
	{"/api|/orders/{id}", probeMountedUse, 5, ""},
	{"/api|/", probeInnerUse, 0, ""},
	{"/t/{tenant}|/v1|/orders/{id}", probeTopUse, 0, ""},
	{"/t/{tenant}|/v1|/orders/{id}", probeWith, 1, ""},
	{"/t/{tenant}|/v1|/orders/{id}", probeInnerUse, 4, ""},
	{"/t/{tenant}|/v1|/orders/{id}", probeWithMount, 1, ""},
	{"/t/{tenant}|/v1|/orders/{id}", probeMountedUse, 2, ""},
	{"/t/{tenant}|/v1|/orders/{id}", probeInnerUse, 3, ""},
	{"/n/{n:[0-9]+}|/items/{id:[0-9]+}", probeInnerUse, 0, ""},
	{"/n/{n:[0-9]{2}}|/x|/items/{id}", probeMountedUse, 4, ""},
	{"/files|/*", probeInnerUse, 0, ""},
	{"/a/{x}|/b/{y}|/c/{z}|/d/{w}", probeInnerUse, 7, ""},
	{"/a|/b|/c|/", probeMountedUse, 1, ""},
	{"/orders/{id}/", probeTopUse, 2, ""},
	{"/api|/orders/{id}-{rev}", probeWith, 0, ""},
	// Found by fuzzing. A sub-router mounted at "/" below a bare mount
	// point ("/0/", where chi's look-up stops): was let through.
	{"/0|/|/", probeInnerUse, 0, ""},
	{"/0|/|/", probeInnerUse, 2, ""},
	{"/0|/|/", probeMountedUse, 0, ""},
	{"/0|/|/", probeWith, 2, ""},
	// A catch-all route at a sub-router's bare mount point.
	{"/0|/*", probeWith, 0, ","},
	{"/0|/*", probeWith, 2, ","},
	// The sub-router's part of the path also routes from the root, to
	// another route through the same mount.
	{"/0|/0|/0", probeMountedUse, 2, "0"},
	{"/0|/0|/0", probeMountedUse, 0, "0"},
	{"/{}|/0|/0", probeMountedUse, 3, "0"},
	{"/{t}|/{t}|/{t}", probeMountedUse, 0, "a,a,a"},
	// A catch-all beside the route: the URL path, which StripSlashes
	// rewrote, routes to the catch-all from the root.
	{"/api|/orders/{id}", probeWithMount, 10, ""},
	{"/api|/orders/{id}", probeMountedUse, 14, ""},
	{"/t/{tenant}|/v1|/orders/{id}", probeInnerUse, 11, ""},
	// r.With before a Mount whose rest is empty, below a path that
	// StripSlashes rewrote: the sub-router routes "/".
	{"//|/", probeWithMount, 63, "0"},
}

// FuzzRouteTemplate builds chi routers from fuzzed lists of patterns,
// sends a request that the route's pattern matches, and compares the
// template the adapter resolves (resolver.route) with chi's own
// RoutePattern seen by the handler. The adapter must never panic; when
// chi routes the request to the handler, the adapter must protect it,
// and the two templates must agree.
func FuzzRouteTemplate(f *testing.F) {
	for _, c := range routeCorpus {
		f.Add(c.spec, c.style, c.flags, c.vals)
	}
	f.Fuzz(func(t *testing.T, spec string, style, flags uint8, vals string) {
		levels := strings.Split(spec, "|")
		if len(levels) > 5 || len(spec) > 200 {
			return
		}
		values := strings.Split(vals, ",")
		res, err := probeRoute(t, levels, int(style)%probeStyles, flags, values)
		if err != nil {
			t.Skip(err)
		}
		switch {
		case !res.ran:
		case !res.ok:
			t.Errorf("%q style %d flags %d: chi routes the request to %q, the adapter lets it through unprotected (%s)", spec, style%probeStyles, flags, res.want, res.debug)
		case res.got != res.want:
			t.Errorf("%q style %d flags %d: adapter %q, chi %q (%s)", spec, style%probeStyles, flags, res.got, res.want, res.debug)
		}
	})
}

// TestRouteCorpus runs the seed corpus and requires that chi routes every
// request to the handler (so that the comparison happens).
func TestRouteCorpus(t *testing.T) {
	for _, c := range routeCorpus {
		vals := c.vals
		if vals == "" {
			vals = "42,7,x"
		}
		res, err := probeRoute(t, strings.Split(c.spec, "|"), int(c.style), c.flags, strings.Split(vals, ","))
		if err != nil {
			t.Errorf("%q style %d flags %d: %v", c.spec, c.style, c.flags, err)
			continue
		}
		if !res.ran {
			t.Errorf("%q style %d flags %d: chi did not route the request to the handler", c.spec, c.style, c.flags)
			continue
		}
		if !res.ok || res.got != res.want {
			t.Errorf("%q style %d flags %d: adapter %q (ok=%v), chi %q", c.spec, c.style, c.flags, res.got, res.ok, res.want)
		}
	}
}

// probeRoute mounts the patterns of levels as nested sub-routers with a
// POST route at the end, puts a probe that calls resolver.route where style
// says, and sends a POST to a path the patterns match (values fill in the
// parameters). It returns what the probe and the handler saw, or an error
// when chi refuses to build the router (it panics on invalid patterns) or
// panics routing the request.
func probeRoute(t *testing.T, levels []string, style int, flags uint8, values []string) (res probeResult, err error) {
	t.Helper()
	probed := false
	probe := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !probed { // the first probe on the way, as the outer middleware
				probed = true
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("resolver.route panicked on %q: %v", r.URL.Path, p)
						}
					}()
					rctx := chi.RouteContext(r.Context())
					res.got, res.ok = new(resolver).route(httptest.NewRecorder(), r, rctx, cmp.Or(rctx.RouteMethod, r.Method))
					res.debug = fmt.Sprintf("known=%q path=%q keys=%q vals=%q url=%q", rctx.RoutePatterns, rctx.RoutePath, rctx.URLParams.Keys, rctx.URLParams.Values, r.URL.Path)
				}()
			}
			next.ServeHTTP(w, r)
		})
	}
	h := func(w http.ResponseWriter, r *http.Request) {
		rctx := chi.RouteContext(r.Context())
		res.ran, res.want = true, rctx.RoutePattern()
	}
	decoy := func(http.ResponseWriter, *http.Request) {}

	root, err := buildRouter(levels, style, flags, probe, h, decoy)
	if err != nil {
		return res, err
	}
	path := concretePath(levels, values)
	if flags&2 != 0 {
		path += "/"
	}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.URL = &url.URL{Path: path}
	r.RequestURI = ""
	func() {
		defer func() {
			if p := recover(); p != nil {
				// chi's own panic while routing: not the adapter's.
				err = fmt.Errorf("chi panicked routing %q: %v", path, p)
			}
		}()
		root.ServeHTTP(httptest.NewRecorder(), r)
	}()
	if err == nil && res.ran && !probed {
		t.Fatalf("the probe did not run on the way to the handler")
	}
	return res, err
}

// probeResult is what probeRoute saw.
type probeResult struct {
	got   string // the adapter's template
	ok    bool   // the adapter found a route
	ran   bool   // chi ran the handler
	want  string // chi's RoutePattern in the handler
	debug string // chi's routing state where the probe ran
}

// buildRouter builds the routers, returning chi's panic as an error.
func buildRouter(levels []string, style int, flags uint8, probe func(http.Handler) http.Handler, h, decoy http.HandlerFunc) (root chi.Router, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("chi refused the routes: %v", p)
		}
	}()
	root = chi.NewRouter()
	if flags&2 != 0 {
		root.Use(middleware.StripSlashes)
	}
	if style == probeTopUse {
		root.Use(probe)
	}
	last := len(levels) - 1
	var add func(r chi.Router, i int)
	add = func(r chi.Router, i int) {
		if flags&8 != 0 {
			r.Post("/*", decoy) // before a Mount at "/", which chi then refuses
		}
		if i == last {
			if flags&1 != 0 {
				r.Post(levels[i]+"/decoy", decoy)
			}
			if style == probeWith || last == 0 && style != probeTopUse {
				r.With(probe).Post(levels[i], h)
			} else {
				r.Post(levels[i], h)
			}
			return
		}
		if flags&1 != 0 {
			r.Post(levels[last], decoy) // shadows the leaf's pattern
		}
		build := func(sub chi.Router) {
			if style == probeMountedUse && i == 0 || style == probeInnerUse && i+1 == last {
				sub.Use(probe)
			}
			add(sub, i+1)
		}
		switch {
		case style == probeWithMount && i == 0:
			sub := chi.NewRouter()
			build(sub)
			r.With(probe).Mount(levels[i], sub)
		case flags&4 != 0:
			sub := chi.NewRouter()
			build(sub)
			r.Mount(levels[i], sub)
		default:
			r.Route(levels[i], build)
		}
	}
	add(root, 0)
	return root, nil
}

// concretePath fills the parameters and wildcards of the patterns of
// levels with values, in order, and joins them as chi joins mounts.
func concretePath(levels []string, values []string) string {
	next := func() string {
		if len(values) == 0 {
			return "v"
		}
		v := values[0]
		values = values[1:]
		return v
	}
	var b strings.Builder
	for i, p := range levels {
		if i > 0 {
			p = strings.TrimPrefix(p, "/")
			if !strings.HasSuffix(b.String(), "/") {
				b.WriteByte('/')
			}
		}
		for j := 0; j < len(p); j++ {
			switch p[j] {
			case '{':
				depth, k := 0, j
				for ; k < len(p); k++ {
					if p[k] == '{' {
						depth++
					} else if p[k] == '}' {
						if depth--; depth == 0 {
							break
						}
					}
				}
				b.WriteString(next())
				j = k
			case '*':
				b.WriteString(next())
			default:
				b.WriteByte(p[j])
			}
		}
	}
	return b.String()
}
