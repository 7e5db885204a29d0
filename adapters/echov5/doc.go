// Package idemechov5 makes Echo v5 (github.com/labstack/echo/v5) handlers
// safe to retry with the Idempotency-Key header, using an [idem.Engine].
// For Echo v4, use github.com/idemkit/idem/adapters/echo.
//
// [Middleware] mounts the engine wherever Echo takes middleware, once on
// the way to each route: either for every route, with per-route options
// given by route template,
//
//	e := echo.New()
//	e.Use(middleware.Recover())          // outermost: a panic releases the key, then 500
//	e.Use(idemechov5.Middleware(engine,  // every route
//		idem.ForRoute("POST", "/search", idem.Optional()),
//		idem.ForRoute("POST", "/webhooks/:source", idem.Skip()),
//		idem.ForRoute("POST", "/payments", idem.TTL(time.Hour)),
//	))
//
// or, on an Echo without it, as group and route middleware, with the
// options where the routes are declared:
//
//	e := echo.New()
//	e.Use(middleware.Recover())
//	api := e.Group("/api", idemechov5.Middleware(engine))                        // a group
//	e.POST("/payments", pay, idemechov5.Middleware(engine, idem.TTL(time.Hour))) // one route
//
// Not both on one route: a middleware on the way to a route that one
// mounted before it (with Use, or on an enclosing group) already protects
// passes the request through, so the outer one's policy applies and the
// inner one's options do not. With echo.NewVirtualHostHandler, mount it
// on each host's Echo.
//
// # Routes
//
// Keys are scoped by the template of the route Echo matched, as
// c.RouteInfo().Path names it ("/orders/:id"), together with the method
// and the engine's namespace, so the same key sent to two routes runs
// both, and the same key sent to /orders/1 and /orders/2 is refused with
// 422. Echo routes before it runs Use, group and route middleware, so the
// template is known in every mounting style; Echo.Pre middleware runs
// before routing and is not supported: it would see no route and let
// every request through unprotected.
//
// c.RouteInfo() also tells which requests are not the middleware's: the
// router's own 404 and 405 answers carry a RouteInfo without a method,
// and a not-found route (Echo.RouteNotFound, and the "/*" catch-all a
// group with middleware registers) carries echo.RouteNotFound. Those
// requests pass through untouched, whatever their Idempotency-Key header
// holds, and so do requests with a method the engine does not protect
// (GET, HEAD, ...). The answer comes from the router for each request, so
// routes added or removed while serving (echo.NewConcurrentRouter) count
// from their first request on.
//
// # Responses and errors
//
// The handler writes into the engine's capture through a *echo.Response
// of its own (Status 200 and Committed false until it writes, as Echo's),
// which echo.UnwrapResponse finds first; the context's original response
// carries what is finally sent (the captured response, a replay or a
// problem), so middleware outside reads the right Committed, Status and
// Size. A protected handler's returned error is rendered inside the
// middleware by Echo's HTTPErrorHandler, so the error page is what is
// stored and replayed (a 5xx page releases the key), and the middleware
// returns nil. When the request is not protected after all (an optional
// key that is absent), the chain runs unchanged and its error is returned
// as usual. A panic releases the key and goes on to middleware.Recover,
// which should be mounted first.
package idemechov5
