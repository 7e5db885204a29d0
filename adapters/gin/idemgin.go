package idemgin

import (
	"maps"

	"github.com/gin-gonic/gin"
	idem "github.com/idemkit/idem/core"
)

// Middleware returns Gin middleware that protects the routes it covers with
// e's policy and opts. Build it once, where the router, group or route is
// declared, and mount it once on the way to each route: globally,
//
//	router.Use(idemgin.Middleware(engine, // every route
//		idem.ForRoute("POST", "/search", idem.Optional()), // options by route
//	))
//
// or per group or route, on a router without the global one:
//
//	api := router.Group("/api", idemgin.Middleware(engine, idem.TTL(time.Hour)))
//	router.POST("/search", idemgin.Middleware(engine, idem.Optional()), search)
//
// A second middleware on the way to a route already protected by one
// (global and again per route) passes the request through: the outer one's
// policy applies, and the inner one's options are ignored.
//
// Keys are scoped by the route template Gin matched (c.FullPath(), such as
// "/orders/:id"), which Gin resolves before any handler of the chain runs,
// so the result is the same wherever the middleware is mounted. Requests
// Gin did not match (404, 405: FullPath is empty) and methods the engine
// does not protect go on down the chain untouched, and so do requests the
// engine does not protect after all (an optional key that is absent, a
// skipped route, a nested middleware): their handlers write to Gin's own
// writer.
//
// The handlers after the middleware write through a gin.ResponseWriter that
// feeds the engine's capture, with Gin's own semantics: the status is sent
// lazily, so c.Status(201) with no body, c.AbortWithStatus and WriteString
// are all captured, stored and replayed.
//
// Errors: when the chain returns having written no body, set no status
// below 400, and left errors in c.Errors (c.Error, c.AbortWithError), the
// response is not the handlers' to give: the key is released, nothing is
// stored, and the status and headers they set go to Gin's writer unsent
// (sent, as Gin does, if they called WriteHeaderNow or AbortWithError), for
// middleware outside this one to render c.Errors as the page. A retry runs
// the handler again. To store and replay error pages instead, mount the
// middleware that renders them after this one: the page it writes is then
// the response. A handler that sets a status below 400 (c.Status(201)) has
// succeeded: its response is stored whatever c.Errors holds.
//
// When the engine answers without running the chain (a replay, a 409, 422,
// 400, 413 or 503), the chain is aborted and the response is written by
// the time the middleware returns. A panic releases the key and goes on to
// Gin's recovery middleware, which should be mounted first.
//
// Values the engine puts in the request's context (such as the
// transaction of pgxstore.Tx) are reached through c.Request.Context(), not
// through c itself, unless the Gin engine's ContextWithFallback is set.
func Middleware(e *idem.Engine, opts ...idem.RouteOption) gin.HandlerFunc {
	p := e.Policy(opts...)
	return func(c *gin.Context) {
		route := c.FullPath()
		if route == "" || !e.Protects(c.Request.Method) {
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
