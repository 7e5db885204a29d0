// Package idemgin makes Gin routes safe to retry with the Idempotency-Key
// header, using the idem engine: unsafe requests that carry the header
// run once, and their retries get the stored response back. The policy
// (key parsing, problems, replay, store or release) lives in the engine;
// this package bridges Gin to it.
//
// # Mounting
//
// Mount the middleware once on the way to each route: once for the whole
// router, with per-route options given by route template in
// idem.ForRoute (in Gin's route syntax),
//
//	router := gin.New()
//	router.Use(gin.Recovery()) // first, so a panic is answered 500 after the key is released
//	router.Use(idemgin.Middleware(engine,
//		idem.ForRoute("POST", "/search", idem.Optional()),
//		idem.ForRoute("POST", "/orders", idem.TTL(time.Hour)),
//	))
//
// or where routes and groups are declared, with their options there:
//
//	router := gin.New()
//	router.Use(gin.Recovery())
//	api := router.Group("/api", idemgin.Middleware(engine))
//	router.POST("/orders", idemgin.Middleware(engine, idem.TTL(time.Hour)), createOrder)
//
// Build each middleware once, where the router is declared: it compiles
// its options into an idem.Policy then, and ignores nil options.
//
// # Nesting
//
// A middleware behind one that already protects the request passes it
// through: the outer one's policy applies and the inner one's options do
// not.
//
// # Route templates
//
// Keys are scoped by the client's namespace, the method and the template
// of the route the request matched, the same string wherever the
// middleware is mounted: the same key sent to /orders/1 and /orders/2 is
// one scope and a 422, and the same key sent to two routes runs both.
// Gin's template is c.FullPath() ("/orders/:id"), which Gin resolves
// before the first handler of the chain runs.
//
// A request the router does not route (404, or 405 for a method the path
// does not have) passes through untouched, whatever its Idempotency-Key
// header holds, and the router answers it as usual; so does a request
// with a method the engine does not protect (GET, HEAD, OPTIONS by
// default). Those requests, and the ones the engine lets through (an
// optional key that is absent, a skipped route, a nested middleware),
// run the rest of the chain on Gin's own writer.
//
// # Middleware order
//
// Gin routes a request before the first handler of its chain runs, so
// neither the router's path options (RedirectTrailingSlash,
// RedirectFixedPath, RemoveExtraSlash, UseRawPath, UseEscapedPath) nor a
// middleware that rewrites the path can take a request past the
// middleware: c.FullPath() is the route whose handlers run. The method,
// though, is c.Request.Method when the middleware runs, and Gin tells
// middleware no method it routed by. A middleware that changes the
// method (a method override) must therefore change it before Gin routes,
// wrapping the engine as an http.Handler, or run after this middleware;
// one between Gin's routing and this middleware could turn a POST into a
// PUT that the engine does not protect, and the POST handler would run
// unprotected.
//
// # Responses and panics
//
// The handlers after the middleware write through a gin.ResponseWriter
// that feeds the engine's capture with Gin's own semantics: the status
// is sent lazily, so c.Status(201) with no body, c.AbortWithStatus and
// WriteString are all captured, stored and replayed, and Written, Size,
// Flush and Hijack behave as on Gin's writer. The response is buffered, stored, then sent; one that
// outgrows the middleware's cap (idem.WithMaxResponseBody) or that the
// handler flushes is stored without its body (or released, as a 5xx is)
// and streams through, and a hijacked connection releases the key. The
// handler reads the request body as usual: the engine has read it for
// the fingerprint and put an identical one in its place.
//
// When the engine answers without running the chain (a replay, or a 400,
// 409, 413, 422 or 503 problem), the chain is aborted and the response is
// written by the time the middleware returns.
//
// A handler that panics has its key released, and the panic goes on to
// the router's recovery middleware (gin.Recovery), which must sit outside
// this middleware.
//
// # Errors
//
// A handler that reports an error with c.Error or c.AbortWithError and
// writes no body leaves the page to error-rendering middleware. When the
// chain returns with no body written, errors in c.Errors, and no status
// set, a status of 400 or more, or the chain aborted, the response is not
// the handlers' to give: the engine releases the key (idem.Abandon) and
// stores nothing (an exactly-once transaction is rolled back), so a retry
// runs the handler again. The status and headers the handlers set go to
// Gin's writer unsent (sent, as Gin does, if they called WriteHeaderNow
// or AbortWithError), so that a renderer mounted before (outside) this
// middleware sees them as without it and writes the page. Mounted after
// (inside) this middleware, the renderer's page is the response, stored
// and replayed like any other. A handler that sets a status below 400
// (c.Status(201)) without aborting has succeeded whatever c.Errors
// holds: its response is stored, and the middleware outside finds it
// written.
//
// # Request context
//
// Values the engine puts in the request's context, such as the
// exactly-once transaction that pgxstore.Tx returns, are in
// c.Request.Context(). Read them from there: c itself, as a
// context.Context, reaches the request's values only when the Gin
// engine's ContextWithFallback is set.
//
//	tx, ok := pgxstore.Tx(c.Request.Context())
package idemgin
