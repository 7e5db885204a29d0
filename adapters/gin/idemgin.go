package idemgin

import (
	"maps"

	"github.com/gin-gonic/gin"
	idem "github.com/idemkit/idem/core"
)

// Middleware returns Gin middleware that protects the routes it covers
// with e's policy and opts; nil options are ignored. Keys are scoped by
// the template of the route Gin matched (c.FullPath(), "/orders/:id"),
// wherever the middleware is mounted, and a request Gin does not route
// passes through untouched. Build it once, where the router is declared:
//
//	router.Use(idemgin.Middleware(engine, idem.ForRoute("POST", "/search", idem.Optional())))
//
// See the package documentation for mounting styles, nesting, what
// passes through, status-only responses, error pages and panics.
func Middleware(e *idem.Engine, opts ...idem.HTTPOption) gin.HandlerFunc {
	p := e.Policy(opts...)
	return func(c *gin.Context) {
		route := c.FullPath()
		if route == "" || !p.Protects(c.Request.Method) {
			c.Next()
			return
		}
		gw, r := c.Writer, c.Request
		defer func() { c.Writer, c.Request = gw, r }()
		b := &writer{c: c, status: gw.Status(), size: -1}
		p.Serve(gw, r, route, b)
		switch {
		case !b.called: // the engine answered
			c.Abort()
			gw.WriteHeaderNow()
		case b.pass: // the chain wrote to gw itself
		case b.left:
			// The response is left to middleware outside: Gin's writer
			// gets the chain's status and headers, as if this middleware
			// were not there.
			if b.hdr != nil {
				h := gw.Header()
				clear(h)
				maps.Copy(h, b.hdr)
			}
			gw.WriteHeader(b.status)
			if b.Written() {
				gw.WriteHeaderNow()
			}
		default:
			gw.WriteHeaderNow()
		}
	}
}

// CheckRoutes returns an error wrapping idem.ErrBadOption when an
// idem.ForRoute rule in opts names a route router does not have (a typo
// would leave the real route on the default policy). Call it once the
// routes are declared, with the options given to Middleware:
//
//	if err := idemgin.CheckRoutes(router, opts...); err != nil {
//		log.Fatal(err)
//	}
func CheckRoutes(router *gin.Engine, opts ...idem.HTTPOption) error {
	var routes []idem.RouteRule
	for _, r := range router.Routes() {
		routes = append(routes, idem.RouteRule{Method: r.Method, Route: r.Path})
	}
	return idem.CheckRoutes(routes, opts...)
}
