// Package idemchi makes the idem engine native to chi
// (github.com/go-chi/chi/v5): unsafe requests that carry an
// Idempotency-Key header run once, and their retries get the stored
// response back.
//
// # Wiring
//
// Mount the middleware once on the way to each route: either once at the
// top of the router, with per-route overrides given by route template,
//
//	r := chi.NewRouter()
//	r.Use(middleware.Recoverer) // outermost: it answers panics with 500
//	r.Use(idemchi.Middleware(engine,
//		idem.ForRoute("POST", "/search", idem.Optional()),
//		idem.ForRoute("POST", "/webhooks/{source}", idem.Skip()),
//	))
//
// or, on a router without it, where routes are declared, with their
// options there:
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
// Build each middleware once, where the router is declared: it compiles
// its options into an idem.Policy then.
//
// Not both on one route: a middleware behind one that already protects the
// request (r.Use at the top and r.With on the route, say) passes it
// through, so the outer one's policy applies and the inner one's options
// do not.
//
// # Route templates
//
// Keys are scoped by the client's namespace, the method and the route
// template chi matched, written as chi's Context.RoutePattern writes it:
// "/orders/{id}", or "/api/orders/{id}" for a route of a sub-router mounted
// at "/api" with r.Route or r.Mount. The same request gets the same
// template wherever the middleware sits: at the top of the router, where
// chi has not routed the request yet and the adapter looks the route up
// itself; in r.With or r.Group, after routing; or inside a mounted
// sub-router, where only part of the pattern is known. So the same key
// sent to /items/1 and /items/2 is one scope and a 422, while the same key
// sent to /echo and /items/1 is two scopes and runs both. (One exception:
// a request for the bare mount point of a sub-router, "/files" for
// r.Mount("/files", sub), that sub routes with a catch-all "/*" route is
// scoped by "/files" with the middleware at the top of the router, and by
// chi's "/files/*" below it.)
//
// A request chi does not route (404, or 405 for a method the path does not
// have) passes through untouched, whatever its key header holds, and chi
// answers it as usual. Methods the engine does not protect (GET, HEAD,
// OPTIONS by default) go to the handler without a look-up.
//
// # Responses and panics
//
// chi handlers are net/http handlers: they write to the ResponseWriter the
// engine hands them, which buffers the response, completes the record and
// then sends it; Flush, http.ResponseController and Hijack behave as the
// core documents. The handler reads the request body as usual: the engine
// has read it for the fingerprint and put an identical one in its place.
// A handler that panics has its key released and the panic goes on to
// chi's middleware.Recoverer, which must sit outside this middleware.
package idemchi
