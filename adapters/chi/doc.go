// Package idemchi makes the idem engine native to chi
// (github.com/go-chi/chi/v5): unsafe requests that carry an
// Idempotency-Key header run once, and their retries get the stored
// response back.
//
// # Mounting
//
// Mount the middleware once on the way to each route: once for the whole
// router, with per-route options given by route template in
// idem.ForRoute,
//
//	r := chi.NewRouter()
//	r.Use(middleware.Recoverer) // outermost: it answers panics with 500
//	r.Use(idemchi.Middleware(engine,
//		idem.ForRoute("POST", "/search", idem.Optional()),
//		idem.ForRoute("POST", "/webhooks/{source}", idem.Skip()),
//	))
//
// or where routes and groups are declared, with their options there:
//
//	r := chi.NewRouter()
//	r.Use(middleware.Recoverer)
//	r.With(idemchi.Middleware(engine, idem.Optional())).Post("/search", search)
//	r.Group(func(r chi.Router) {
//		r.Use(idemchi.Middleware(engine, idem.TTL(time.Hour)))
//		r.Post("/orders", createOrder)
//		r.Post("/orders/{id}/payments", pay)
//	})
//
// It works in every place chi takes middleware: r.Use, r.With, r.Group
// and a mounted sub-router's r.Use. Build each middleware once, where the
// router is declared: it compiles its options into an idem.Policy then,
// and ignores nil options.
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
// chi's template is written as its Context.RoutePattern writes it:
// "/orders/{id}", or "/api/orders/{id}" for a route of a sub-router
// mounted at "/api" with r.Route or r.Mount. At the top of the router chi
// has not routed the request yet and the adapter looks the route up
// itself; inside a mounted sub-router it completes the part chi has
// matched. (One exception: a request for the bare mount point of a
// sub-router, "/files" for r.Mount("/files", sub), that sub routes with a
// catch-all "/*" route is scoped by "/files" with the middleware in front
// of sub, at the top of the router or in sub's r.Use, and by chi's
// "/files/*" with the middleware on that route.)
//
// A request the router does not route (404, or 405 for a method the path
// does not have) passes through untouched, whatever its Idempotency-Key
// header holds, and the router answers it as usual; so does a request
// with a method the engine does not protect (GET, HEAD, OPTIONS by
// default).
//
// # Responses and panics
//
// chi handlers are net/http handlers: they write to the ResponseWriter
// the engine hands them. The response is buffered, stored, then sent; one
// that outgrows the engine's cap (idem.WithMaxResponseBody) or that the
// handler flushes is stored without its body (or released, as a 5xx is)
// and streams through, and a hijacked connection releases the key. The
// handler reads the request body as usual: the engine has read it for
// the fingerprint and put an identical one in its place.
//
// A handler that panics has its key released, and the panic goes on to
// the router's recovery middleware (middleware.Recoverer), which must sit
// outside this middleware.
package idemchi
