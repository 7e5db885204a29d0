// Package idemgin makes Gin routes safe to retry with the Idempotency-Key
// header, using the idem engine.
//
// Mount the middleware once on the way to each route: either once at the
// top of the router, with per-route options given by route template in
// idem.ForRoute (in Gin's route syntax),
//
//	engine, _ := idem.New(memstore.New())
//
//	router := gin.New()
//	router.Use(gin.Recovery()) // first, so a panic is answered 500 after the key is released
//	router.Use(idemgin.Middleware(engine,
//		idem.ForRoute("POST", "/search", idem.Optional()),
//		idem.ForRoute("POST", "/orders", idem.TTL(time.Hour)),
//	))
//
// or, on a router without it, per group and per route, with the options
// where they are declared:
//
//	router := gin.New()
//	router.Use(gin.Recovery())
//	api := router.Group("/api", idemgin.Middleware(engine))
//	router.POST("/orders", idemgin.Middleware(engine, idem.TTL(time.Hour)), createOrder)
//
// Not both on one route: a middleware on the way to a route that one
// mounted before it already protects passes the request through, so the
// outer one's policy applies and the inner one's options do not.
//
// Keys are scoped by the method, the client's namespace and the route
// template Gin matched (c.FullPath(), "/orders/:id"), so the same key on
// /orders/1 and /orders/2 is refused with 422 while the same key on two
// different routes is two different requests. Gin resolves the template
// before the first handler of the chain runs, so it is known in every
// mounting style; requests Gin does not match (404 and 405) pass through
// untouched.
//
// The handlers after the middleware see a gin.ResponseWriter that writes
// into the engine's capture with Gin's own semantics (lazy status, Written,
// Size, WriteString, Flush, Hijack), and a c.Request whose body the engine
// has already read and replaced with the same bytes. The policy (key
// parsing, 400/409/413/422/503 problems, replay, store or release) lives in
// the idem core; this package only bridges Gin to it.
//
// # Errors
//
// A handler that reports an error with c.Error or c.AbortWithError and
// writes no body leaves the page to error-rendering middleware. Mounted
// before (outside) this middleware, that middleware writes the page after
// the chain returns: the key is released and nothing is stored (an
// exactly-once transaction is rolled back), so a retry runs the handler
// again, and the renderer sees the status and headers the handler set, as
// without this middleware. Mounted after (inside) it, the page it writes
// is captured, stored and replayed like any response. A handler that sets
// a status below 400 (c.Status(201)) has succeeded even with errors in
// c.Errors: its response is stored, and the middleware outside finds it
// written.
//
// # Request context
//
// Values the engine puts in the request's context, such as the exactly-once
// transaction that pgxstore.Tx returns, are in c.Request.Context(). Read
// them from there: c itself, as a context.Context, reaches the request's
// values only when the Gin engine's ContextWithFallback is set.
//
//	tx, ok := pgxstore.Tx(c.Request.Context())
package idemgin
