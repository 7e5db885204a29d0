// Package idemecho makes Echo (github.com/labstack/echo/v4) handlers safe to
// retry with the Idempotency-Key header, using an [idem.Engine].
//
// [Middleware] mounts the engine wherever Echo takes middleware, once on
// the way to each route: either for every route, with per-route options
// given by route template,
//
//	e := echo.New()
//	e.Use(middleware.Recover())            // outermost: a panic releases the key, then 500
//	e.Use(idemecho.Middleware(engine,      // every route
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
//	api := e.Group("/api", idemecho.Middleware(engine))                        // a group
//	e.POST("/payments", pay, idemecho.Middleware(engine, idem.TTL(time.Hour))) // one route
//
// Not both on one route: a middleware on the way to a route that one
// mounted before it (with Use, or on an enclosing group) already protects
// passes the request through, so the outer one's policy applies and the
// inner one's options do not.
//
// Keys are scoped by the route template Echo matched, as c.Path() names it
// ("/orders/:id"), together with the method and the engine's namespace, so
// the same key sent to two routes runs both, and the same key sent to
// /orders/1 and /orders/2 is refused with 422. Echo resolves the route
// before it runs Use, group and route middleware, so the template is known
// in every mounting style. Echo.Pre middleware runs before routing and is
// not supported: there the middleware would see no route and let every
// request through unprotected.
//
// Requests that matched no route (Echo's 404, including a group's
// catch-all not-found route) or no route of their method (405) pass
// through untouched, whatever their Idempotency-Key header holds; so do
// requests with a method the engine does not protect (GET, HEAD, ...).
//
// The handler writes into the engine's capture through a *echo.Response of
// its own (Status 200 and Committed false until it writes, as Echo's); the context's original response carries what is finally sent
// (the captured response, a replay or a problem), so Committed, Status and
// Size are right for the middleware outside. A handler's returned error is
// answered inside the middleware with c.Error, so Echo's HTTP error handler
// page is what is stored and replayed, and the middleware returns nil. When
// the request is not protected after all (an optional key that is absent),
// the chain runs unchanged and its error is returned as usual.
package idemecho
