// Package idemgin makes Gin routes safe to retry with the Idempotency-Key
// header, using the idem engine.
//
// Mount the middleware once at the top of the router, on a group, or in a
// route's handler chain; per-route options go where the route is declared
// (or, for a middleware mounted once, in idem.ForRoute with Gin's route
// syntax):
//
//	engine, _ := idem.New(memstore.New())
//
//	router := gin.New()
//	router.Use(gin.Recovery()) // first, so a panic is answered 500 after the key is released
//	router.Use(idemgin.Middleware(engine,
//		idem.ForRoute("POST", "/search", idem.Optional()),
//	))
//
//	// or per group and per route:
//	api := router.Group("/api", idemgin.Middleware(engine))
//	router.POST("/orders", idemgin.Middleware(engine, idem.TTL(time.Hour)), createOrder)
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
package idemgin
