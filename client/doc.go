// Package idemclient is the client half of idem: an http.RoundTripper
// that makes unsafe requests safe to retry against any server that honours
// the Idempotency-Key header (idem, or Stripe-style APIs).
//
//	client, err := idemclient.NewClient()
//	resp, err := client.Post("https://api.example.com/orders", "application/json", body)
//
// # Keys
//
// A protected request (POST and PATCH by default, WithMethods) without a
// key header gets one random key (NewKey, a UUID) before its first
// attempt, and every attempt carries it; a key the caller set is kept. The
// server runs the first attempt that reaches it and answers every other
// with the stored response, so the handler runs once however many
// attempts were made. A request that has no key in the end (WithKeyFunc
// returned "", or the caller set the header empty) and a method that is
// not protected are sent once, as they are. The caller's request is never
// modified; each attempt is a clone.
//
// # What is retried
//
//	the answer                                          retried?
//	409 whose body says "in progress" (InProgress)      yes, honouring Retry-After
//	429, 502, 503, 504                                  yes, honouring Retry-After
//	connection refused, reset or closed before the
//	  response (EOF), a timeout before the headers      yes, with backoff
//	HTTP/2: the stream reset with REFUSED_STREAM or
//	  INTERNAL_ERROR, or GOAWAY (NO_ERROR or
//	  INTERNAL_ERROR) and the connection closed         yes, with backoff
//	HTTP/2: any other reset or GOAWAY code              no
//	a replayed response (Idempotent-Replayed: true)     no: it is the stored answer
//	any other status: 2xx, 3xx, 400, 413, 422, 500, ... no
//	any error once the request's context has ended      no
//
// A retry may follow an attempt that reached the server; that is safe only
// because the key makes the server run the request once. A conflict from
// the application itself (a 409 without the in-progress body) is returned.
// Of a 409, at most 4 KiB of the body is read to decide, and it is put
// back: the caller always gets the final response's whole body. A
// discarded response is drained a little and closed, so its connection can
// be reused. net/http's own Transport may, once, resend a request with an
// Idempotency-Key on a fresh connection when a reused one fails; that
// happens inside an attempt.
//
// # Bodies
//
// A retry sends the whole body again: from req.GetBody when it is set (as
// http.NewRequest does for bytes, strings and their readers), otherwise
// from a copy the transport buffers, up to 1 MiB (WithMaxBufferedBody).
// Buffering reads the body, up to the limit and one byte more, before the
// first attempt sends anything: a body produced slowly (a pipe, a stream)
// is held back until it ends or passes the limit. A longer body is then
// sent once, what was read followed by the rest, and never retried. When
// reading the body fails, or the request's context ends first, nothing is
// sent: RoundTrip closes the body and returns an *Error with no attempt.
//
// # Waits and limits
//
// The wait before a retry is the answer's Retry-After (seconds, or an
// HTTP-date read against the response's Date), cut to 10 s
// (WithRetryAfterCap); without one it is "full jitter" exponential backoff:
// after the n-th failed attempt, a random time up to 100 ms·2^(n-1), at
// most 5 s (WithBackoff). A logical request makes at most 5 attempts
// (WithMaxAttempts), not counting those answered with an in-progress 409:
// the first attempt is still running, or its crashed server's lease has
// not ended, so the transport keeps asking while the budget allows, at
// least 100 ms apart (the backoff base) whatever the Retry-After, and
// without one after a backoff of their own: in-progress answers never
// lengthen the backoff of a failure. No retry is made whose wait would end
// more than 30 s after the first attempt began (WithBudget), or at or
// after the context's deadline: then the last answer is returned at once.
// The request's context always wins: no attempt starts after it ends, and
// a wait it interrupts ends the request with its error. Bound one attempt
// with the base transport's ResponseHeaderTimeout (a timeout is retried)
// and the whole logical request with http.Client.Timeout or the context.
//
// These limits and waits are a RetryPolicy, which NewRetryPolicy builds
// from the same options for clients of other protocols: the gRPC client
// interceptor (idemgrpc) retries by it.
//
// # What happened
//
// ResultOf(resp) gives the final response's Result: the key, how many
// attempts were made, and whether the answer was a replay. A request whose
// last attempt got no response fails with an *Error carrying the key and
// the attempt count: sending it again later with that key is still safe.
// WithOnAttempt sets a hook called after every attempt with its status or
// error, and the wait before the next one, for logs and metrics.
package idemclient
