// Package idemfiber makes Fiber v3 routes safe to retry with the
// Idempotency-Key header, using the idem engine: unsafe requests that
// carry the header run once, and their retries get the stored response
// back. The policy (key parsing, problems, replay, store or release)
// lives in the engine; this package bridges Fiber to it natively, on
// fasthttp's request and response, through the engine's lifecycle
// (idem.Policy.Start, idem.Call.Finish and Release): no net/http adaptor
// sits on the request path.
//
// # Mounting
//
// Mount the middleware on the routes it protects, as a route handler
// before the route's own:
//
//	app := fiber.New()
//	app.Use(recover.New()) // outside, so a panic is answered 500 after the key is released
//	mw := idemfiber.Middleware(engine)
//	app.Post("/orders", mw, createOrder)
//	api := app.Group("/api")
//	api.Post("/payments/:id", mw, capturePayment)
//	app.Post("/search", idemfiber.Middleware(engine, idem.Optional()), search)
//
// One middleware may serve many routes, with per-route options given by
// route template in idem.ForRoute (in Fiber's route syntax, group prefix
// included: "/api/payments/:id"); check those with CheckRoutes. Build
// each middleware once, where the routes are declared.
//
// Do not mount it with app.Use or as a group's handlers
// (app.Group("/api", mw)). Fiber routes lazily: a middleware mounted that
// way runs before Fiber has matched a route, so it cannot know the route
// template that scopes keys, nor the route's options. Rather than guess,
// or let requests through unprotected, it fails closed: every request
// with a method the middleware protects gets a 500 problem of type
// "route-unknown" (other methods pass). It tells the two apart with
// c.Matched(), which Fiber sets once a route matched: an app.Use
// middleware reached after a route's handler called c.Next() sees it
// set, and scopes keys by the app.Use prefix; do not mount it so.
//
// A middleware behind one that already protects the request (mounted
// twice on a route) passes it through: the outer one's policy applies.
//
// # Keys and scopes
//
// Keys are scoped by the client's namespace, the method and the route
// template Fiber matched (c.Route().Path, "/orders/:id"). Only methods
// the middleware protects (POST and PATCH by default) are handled. A request
// without a key gets 400 where the key is required and runs unprotected
// where it is optional (idem.Optional); a route
// marked idem.Skip is never protected; idem.TTL sets a route's
// retention. The fingerprint is the engine's: the method, the request
// target as sent (c.OriginalURL()) and the body, or the body's canonical
// JSON under idem.WithJSONFingerprint (400 when it is not JSON).
//
// # What is refused, and what replaces it
//
// The HTTP options that work on a *http.Request cannot run here:
// idem.WithNamespace, idem.WithFingerprint and idem.RouteFunc take one,
// and idem.WithKeyField reads the key from the body inside the net/http
// middleware. Middleware panics with an error wrapping ErrBadOption
// when given any of them, rather than ignore them. Every other
// idem.HTTPOption (the key and replay headers, the methods, the body
// caps, the JSON fingerprint, the release rule, the replayed headers,
// the problem type base) applies as on net/http.
//
// Config holds the Fiber equivalents:
//
//	idemfiber.Config{
//		Namespace: func(c fiber.Ctx) string { return fiber.Locals[string](c, "tenant") },
//	}.Middleware(engine)
//
// Mount the middleware after the authentication Namespace reads. There
// is no equivalent of WithKeyField: the key comes from the header.
//
// # Request bodies
//
// The body is read for the fingerprint, up to idem.WithMaxRequestBody (a
// larger one gets a 413 problem of type "body-too-large"). With Fiber's
// StreamRequestBody the stream is read here, up to the cap, and the
// handler gets the bytes in its place.
//
// # Responses
//
// After the chain returns, the middleware captures fasthttp's response
// (status, headers, body) and hands it to the engine, which stores it or
// releases the key by the release rule (5xx and 429 by default are
// released), drops the headers a replay must not carry (Set-Cookie,
// Date, hop-by-hop) and stores a body past idem.WithMaxResponseBody
// without its bytes. Headers that middleware outside set before the
// chain ran, and the handlers left as they were, are the current
// request's (a request ID): they are not stored. A replay writes the
// stored status, headers and body, with the Idempotent-Replayed marker.
//
// A streamed body (c.SendStream, c.SendStreamWriter: any response
// fasthttp sends from a body stream) is not buffered: the response's status and headers are stored with the body
// omitted (replayed with Idempotent-Body-Omitted: true and an empty
// body), or released as any response of its status.
//
// # Errors and panics
//
// A handler that returns an error has it rendered inside the middleware
// by the app's error handler (c.App().ErrorHandler, the mounted sub-app's
// when there is one), so that the page it writes is the response: a
// fiber.ErrConflict is stored and replayed as a 409, a plain error's 500
// releases the key. The middleware then returns nil, so middleware
// outside it does not see the error.
//
// A handler that panics has its key released (an exactly-once
// transaction rolled back), and the panic goes on to Fiber's recover
// middleware, which must sit outside this middleware.
//
// # Request context
//
// The context the engine gives the operation (with an exactly-once
// store's transaction, such as pgxstore.Tx reads) is set as the
// request's user context: read it with c.Context().
package idemfiber
