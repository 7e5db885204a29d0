// Package idemechov5 makes Echo v5 (github.com/labstack/echo/v5) handlers
// safe to retry with the Idempotency-Key header, using an [idem.Engine]:
// unsafe requests that carry the header run once, and their retries get
// the stored response back. For Echo v4, use
// github.com/idemkit/idem/adapters/echo.
//
// # Mounting
//
// Mount the middleware once on the way to each route: once for the whole
// router, with per-route options given by route template in
// idem.ForRoute (in Echo's route syntax),
//
//	e := echo.New()
//	e.Use(middleware.Recover())         // outermost: a panic releases the key, then 500
//	e.Use(idemechov5.Middleware(engine, // every route
//		idem.ForRoute("POST", "/search", idem.Optional()),
//		idem.ForRoute("POST", "/webhooks/:source", idem.Skip()),
//		idem.ForRoute("POST", "/payments", idem.TTL(time.Hour)),
//	))
//
// or where routes and groups are declared, with their options there:
//
//	e := echo.New()
//	e.Use(middleware.Recover())
//	api := e.Group("/api", idemechov5.Middleware(engine))                        // a group
//	e.POST("/payments", pay, idemechov5.Middleware(engine, idem.TTL(time.Hour))) // one route
//
// Echo.Use, group and route middleware and Echo.Pre all work. With
// echo.NewVirtualHostHandler, mount it on each host's Echo, and keep the
// hosts' keys apart with idem.WithNamespace (say, the request's host):
// each host's Echo names its routes alike, and one engine would take
// "POST /orders" on two hosts for one route. Build each
// middleware once, where the router is declared: it compiles its options
// into an idem.Policy then, and ignores nil options.
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
// Echo's template is c.RouteInfo().Path ("/orders/:id"), which Echo
// resolves before it runs Use, group and route middleware.
//
// A request the router does not route (404, or 405 for a method the path
// does not have) passes through untouched, whatever its Idempotency-Key
// header holds, and the router answers it as usual; so does a request
// with a method the engine does not protect (GET, HEAD, OPTIONS by
// default). A request that reaches a not-found route (Echo.RouteNotFound,
// or the "/*" catch-all a group with middleware registers) counts as a
// 404. c.RouteInfo() tells them apart for each request (the router's 404
// and 405 have no method, a not-found route has echo.RouteNotFound), so
// routes added or removed while serving (echo.NewConcurrentRouter) count
// from their first request on.
//
// # Middleware order
//
// Use, group and route middleware run after Echo has routed the request,
// after any rewrite in Echo.Pre (RemoveTrailingSlash, Rewrite,
// MethodOverride); the request is judged by the method Echo routed it by
// (c.RouteInfo().Method; for an Any route, the request's), so a method
// changed after routing does not take a POST handler out of protection. In Echo.Pre, Echo has not routed
// the request: the middleware routes a request with a protected method
// itself, with Echo's router, and one that the router routes nowhere
// gets the router's answer there and goes no further, so a later Pre
// rewrite cannot take it past the middleware. A later Pre middleware
// that turns a GET into a POST is not seen: put method overrides before
// it (Echo's own MethodOverride changes POST only).
//
// # Responses, errors and panics
//
// The handler writes into the engine's capture through an *echo.Response
// of its own (Status 200 and Committed false until it writes, as Echo's),
// which echo.UnwrapResponse finds first; the context's original response
// carries what is finally sent (the captured response, a replay or a
// problem), so middleware outside reads the right Committed, Status and
// Size. The response is buffered, stored, then sent; one that outgrows
// the middleware's cap (idem.WithMaxResponseBody) or that the handler flushes
// is stored without its body (or released, as a 5xx is) and streams
// through, and a hijacked connection releases the key. The handler reads
// the request body as usual: the engine has read it for the fingerprint
// and put an identical one in its place.
//
// A protected handler's returned error is rendered inside the middleware
// by Echo's HTTPErrorHandler, so the error page is what is stored and
// replayed (a 5xx page releases the key), and the middleware returns nil.
// When the request is not protected after all (an optional key that is
// absent), the chain runs unchanged and its error is returned as usual.
//
// A handler that panics has its key released, and the panic goes on to
// the router's recovery middleware (middleware.Recover), which must sit
// outside this middleware.
package idemechov5
