// Package idemchi makes the idem engine native to chi
// (github.com/go-chi/chi/v5): unsafe requests that carry an
// Idempotency-Key header run once, and their retries get the stored
// response back.
//
// # Mounting
//
// Mount the middleware once on the way to each route, in r.Use (options
// per route in idem.ForRoute), r.With, r.Group or a sub-router's r.Use:
//
//	r := chi.NewRouter()
//	r.Use(middleware.Recoverer, middleware.StripSlashes) // recovery outermost, rewrites before idem
//	r.Use(idemchi.Middleware(engine, idem.ForRoute("POST", "/search", idem.Optional())))
//	r.With(idemchi.Middleware(engine, idem.TTL(time.Hour))).Post("/orders", createOrder)
//
// Build each middleware once, where the router is declared; nil options
// are ignored. A middleware behind one that already protects the request
// passes it through: the outer one's policy applies.
//
// # Route templates and middleware order
//
// Keys are scoped by the client's namespace, the method and the full
// template of the route, as chi's RoutePattern writes it: "/orders/{id}",
// or "/api/orders/{id}" inside r.Route("/api", ...) or r.Mount. In r.With
// and r.Group, chi has routed the request and the template is chi's. In
// r.Use, chi has not: the middleware asks the router, with chi's Find,
// where it routes the request as it is then. A middleware that rewrites
// the path or the method (StripSlashes, CleanPath, URLFormat, a method
// override) must therefore come before idem in r.Use, or idem go inline.
// A rewrite after idem cannot take a request past it unprotected: a
// request with a protected method that chi does not route when idem sees
// it gets the router's own 404 or 405 (its NotFound and MethodNotAllowed
// handlers, with Allow set), and a request with another method is routed
// by the method idem saw. A method changed after chi routed the request
// is judged by the method chi routed it by.
//
// A request the router routes nowhere gets the router's answer whatever
// its Idempotency-Key holds, and one with a method the engine does not
// protect (it protects POST and PATCH by default) passes through.
//
// # Responses and panics
//
// The response is buffered, stored, then sent (streamed and stored
// without its body past idem.WithMaxResponseBody or a Flush). A handler
// that panics has its key released, and the panic goes on to
// middleware.Recoverer, which must sit outside this middleware.
package idemchi
