// Package idem makes unsafe HTTP requests (POST, PATCH) safe to retry with
// the Idempotency-Key header.
//
// The first request with a key runs the handler and its response is stored;
// every retry with the same key and the same request gets that response
// replayed with Idempotent-Replayed: true. A retry with a different request
// gets 422, a retry while the first is still running gets 409 (or waits, in
// wait mode), and a response the client should retry (5xx, 429, a panic)
// releases the key so the next retry runs again.
//
// An [Engine] holds the policy and talks to a [Store], which does everything
// that must be atomic. [Engine.Middleware] is a plain net/http middleware
// that scopes keys by the ServeMux pattern; the adapters for Gin, Echo and
// Chi wrap [Engine.Serve].
package idem
