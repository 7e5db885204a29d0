// Package idemecho makes Echo (github.com/labstack/echo/v4) handlers safe
// to retry with the Idempotency-Key header, using an [idem.Engine]:
// unsafe requests that carry the header run once, and their retries get
// the stored response back. For Echo v5, use
// github.com/idemkit/idem/adapters/echov5.
//
// # Mounting
//
// Mount the middleware once on the way to each route: once for the whole
// router, with per-route options given by route template in
// idem.ForRoute (in Echo's route syntax),
//
//	e := echo.New()
//	e.Use(middleware.Recover())       // outermost: a panic releases the key, then 500
//	e.Use(idemecho.Middleware(engine, // every route
//		idem.ForRoute("POST", "/search", idem.Optional()),
//		idem.ForRoute("POST", "/webhooks/:source", idem.Skip()),
//		idem.ForRoute("POST", "/payments", idem.TTL(time.Hour)),
//	))
//
// or where routes and groups are declared, with their options there:
//
//	e := echo.New()
//	e.Use(middleware.Recover())
//	api := e.Group("/api", idemecho.Middleware(engine))                        // a group
//	e.POST("/payments", pay, idemecho.Middleware(engine, idem.TTL(time.Hour))) // one route
//
// Build each middleware once, where the router is declared; it ignores
// nil options. A middleware behind one that already protects the request
// passes it through: the outer one's policy applies.
//
// # Route templates
//
// Keys are scoped by the client's namespace, the method and the template
// of the route the request matched, the same string wherever the
// middleware is mounted: the same key sent to /orders/1 and /orders/2 is
// one scope and a 422, and the same key sent to two routes runs both.
// Echo's template is c.Path() ("/orders/:id"), which Echo resolves before
// it runs Use, group and route middleware; routes of an Echo.Host router
// are found as Echo finds them, and their template starts with the host
// ("api.example.com/orders/:id"), so that one host's route never answers
// for another's.
//
// # Middleware order
//
// Use, group and route middleware run after Echo has routed the request,
// after any rewrite in Echo.Pre (RemoveTrailingSlash, Rewrite,
// MethodOverride). Echo v4 tells middleware no method it routed by, so a
// middleware that changes the method must run in Echo.Pre (as Echo's
// MethodOverride must) or after this one: between them, it could turn a
// routed POST into a PUT the engine does not protect. In Echo.Pre the
// middleware asks Echo's router where it routes the request as it is
// then, and must come after every Pre middleware that rewrites the path
// or method: Echo v4 gives it no way to tell a request Echo has yet to
// route from a 404, which it lets through.
//
// A request the router does not route (404, or 405 for a method the path
// does not have) passes through untouched, whatever its Idempotency-Key
// header holds, and the router answers it as usual; so does a request
// with a method the engine does not protect (GET, HEAD, OPTIONS by
// default). A request that reaches a not-found route (Echo.RouteNotFound,
// or the catch-all a group with middleware adds) counts as a 404.
//
// # Responses, errors and panics
//
// The handler writes into the engine's capture through an *echo.Response
// of its own (Status 200 and Committed false until it writes, as Echo's);
// the context's original response carries what is finally sent (the
// captured response, a replay or a problem), so Committed, Status and
// Size are right for the middleware outside. The response is buffered,
// stored, then sent; one that outgrows the middleware's cap
// (idem.WithMaxResponseBody) or that the handler flushes is stored
// without its body (or released, as a 5xx is) and streams through, and a
// hijacked connection releases the key. The handler reads the request
// body as usual: the engine has read it for the fingerprint and put an
// identical one in its place.
//
// A protected handler's returned error is answered inside the middleware
// with c.Error, so Echo's HTTP error handler page is what is stored and
// replayed (a 5xx page releases the key), and the middleware returns nil.
// When the request is not protected after all (an optional key that is
// absent), the chain runs unchanged and its error is returned as usual.
//
// A handler that panics has its key released, and the panic goes on to
// the router's recovery middleware (middleware.Recover), which must sit
// outside this middleware.
package idemecho
