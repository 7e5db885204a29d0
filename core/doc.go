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
// An [Engine] holds what every transport shares (the [Option]s given to
// [New]: lease, retention, heartbeat, waiting, observers, failing open)
// and talks to a [Store], which does everything that must be atomic.
// [Engine.Middleware] is a plain net/http middleware that scopes keys by
// the ServeMux pattern; the adapters for Gin, Echo, Chi and Fiber are
// built on the same [Policy]. Each takes the HTTP transport's
// [HTTPOption]s (the key header, the methods, the body caps, the namespace
// and fingerprint functions, the release rule) and the [RouteOption]s
// (required, optional, skip, retention) where it is mounted:
//
//	engine, err := idem.New(store, idem.WithWait(5*time.Second))
//	h := engine.Middleware(idem.WithNamespace(tenant), idem.ForRoute("POST", "/search", idem.Optional()))(mux)
//
// [Engine.Do] runs any other operation (a message to consume, a job)
// through the same lifecycle: claim the key, check the fingerprint, answer
// a conflict or wait, keep the claim alive while the work runs, then
// complete or release, and replay to retries.
// [Engine.Start] gives a transport that lifecycle without a closure, with
// [Call.Finish] or [Call.Release] to end it: the gRPC server interceptor
// is written on it, and the Fiber adapter on [Policy.Start], which
// finishes a call by the policy's HTTP options.
//
// # Outcomes
//
// Each transport maps the lifecycle's outcomes (Event.Outcome) to its own
// protocol:
//
//	outcome                  HTTP middleware            gRPC (idemgrpc)            Engine.Do
//	executed                 the handler's response     the handler's response     fn's value
//	replayed, after a wait   stored response and        stored response, header    stored value,
//	                         Idempotent-Replayed: true  idempotency-replayed: true replayed true
//	conflict, wait_timeout   409 and Retry-After        Aborted and RetryInfo      *RetryError, ErrInFlight
//	fingerprint_mismatch     422                        FailedPrecondition         ErrMismatch
//	missing_key (required)   400                        InvalidArgument            (not applicable)
//	invalid_key              400                        InvalidArgument            ErrInvalidKey
//	body_too_large           413                        (not applicable)           (not applicable)
//	body_unreadable, or      400 (invalid-json)         (not applicable)           (not applicable)
//	invalid JSON under
//	WithJSONFingerprint
//	store_failure            503 and Retry-After        Unavailable and RetryInfo  *RetryError, ErrStoreFailure
//	released                 the 5xx or 429 sent        the error status sent      fn's error
//	a failed exactly-once    503 and Retry-After        Unavailable and RetryInfo  *RetryError, ErrStoreFailure
//	commit
//	a replay of a result     status and headers,        DataLoss                   ErrResultOmitted
//	kept without its body    Idempotent-Body-Omitted
//	no_namespace (required)  403                        PermissionDenied           ErrNamespaceRequired
//	not_acceptable           406                        (not applicable)           (not applicable)
//	canceled (hang-up)       499 (the client is gone)   Canceled                   the context's error
//	undecryptable (a sealed  500 (record-unreadable)    DataLoss                   ErrUndecryptable
//	record this engine
//	cannot open)
//
// What is stored rather than released: in HTTP every status but 5xx and
// 429 ([WithReleaseRule]); in gRPC the codes its options name final; in Do
// an error marked with [Final].
//
// # Exactly-once
//
// When the store implements [store.TxBeginner] (pgxstore's and mysqlstore's
// ExactlyOnce views), every claimed request runs like this:
//
//  1. Claim commits on its own, as always, so duplicates see the claim.
//     A store that also implements [store.TxClaimer] (mysqlstore's) claims
//     inside the transaction instead, with ClaimTx, and shows duplicates
//     the uncommitted claim itself: the claim commits with the record, one
//     durable commit instead of two, and a rollback takes it along.
//  2. BeginTx starts a transaction (after ClaimTx, which started one, it
//     is not called); the handler runs with the context Tx.Context
//     derives from the request's, which carries the transaction (the
//     store says how to reach it: pgxstore.Tx, mysqlstore.Tx).
//  3. When the response is to be stored, Tx.Commit writes the completed
//     record in the transaction and commits it before the response is
//     sent: the handler's writes and the record commit together or not at
//     all. When Commit fails the engine answers 503 and releases the
//     claim, token-checked, so a record that did commit (as it may when
//     the connection is lost during COMMIT) stays and is replayed to the
//     retry.
//  4. When the response is not to be stored (5xx, 429, panic, hijack), or
//     after a failed Commit, the engine rolls back and releases the key.
//
// The commit happens when the response is stored, before its first byte
// is sent: normally once the handler returns, but a response that streams
// (the handler flushes, or its body outgrows WithMaxResponseBody) is
// stored, with its body omitted, when it starts streaming. The handler's
// writes through the transaction after that point fail: a streaming
// handler does its writes first. A failed commit is never retried in the
// background: the transaction is gone.
//
// # Time
//
// Leases are judged by comparing the time the engine passes to a store
// call with the lease ends that other engines wrote, so instances whose
// clocks disagree could take over each other's live claims. When the store
// implements [Clock] (the PostgreSQL, MySQL and Redis stores do), the
// engine measures the difference between its clock and the store's at its
// first claim, with one round trip, then again in the background with the
// best of three every minute, and adds it to every time it passes: every
// instance judges leases on the store's clock, whatever its own says.
// [Engine.ClockOffset] reports the difference and its error bound, half
// the round trip of the sample it came from; two instances agree to within
// the sum of their bounds plus their clocks' drift over a minute (a few
// milliseconds on a LAN), far below a heartbeat interval. A step of the
// host's clock (NTP stepping it, an operator setting it) is not drift:
// until the next measurement, up to a minute later, the engine's times
// are off by the step, and a step back of more than a few seconds can end
// this instance's leases early in the others' eyes; let NTP slew rather
// than step on hosts that run the engine. With [WithClock] the clock given
// is aligned the same way, so a test clock that jumps forward still moves
// the engine's time forward; give it a clock that keeps time.Now's
// monotonic reading (time.Now().UTC() drops it), or a step of the host's
// clock is taken for such a jump and the difference is no longer
// measured.
//
// # Recovery
//
// A fault costs seconds, not the lease. When the store implements
// [store.Extender], the engine extends a running request's claim every third
// of the lease (15 s by default): a handler of any length keeps its
// claim, and a crashed instance's keys free within the lease. Each beat
// is one Extend per request in flight; a handler shorter than a beat
// costs none. Stores without Extender get a 5-minute lease.
//
// A 409 carries Retry-After: the hint of [WithRetryAfter] (1 s), never
// more than the lease left. So does the 503 of a failing store.
//
// Store calls that must land after the client has its answer are retried
// in the background, with full-jitter backoff capped at one second, so
// they land within about a second of the store's return:
//
//   - A Complete that failed after the handler ran (the store timed out or
//     was down): the client gets its response, the claim is kept alive
//     with Extend, and a retry meanwhile gets 409 (or waits) and then the
//     replay. It ends when the record lands ([OutcomeCompletedLate]), the
//     claim is lost ([OutcomeCompletionLost]), [WithCompletionRetry]'s limit
//     passes ([OutcomeCompletionExpired]) or it is dropped
//     ([OutcomeCompletionDropped]).
//   - A Release that failed (after a 5xx or a panic), and the release of a
//     claim whose Claim call failed but may have landed (the client was
//     told 503): retried until the claim's lease ends, then reported as
//     [OutcomeReleaseFailed].
//
// A claim whose lease ended while the store was away still belongs to its
// request unless another took the key over meanwhile, so a completion
// lands when the store is back, past the lease end too.
//
// Each case is reported to the Observer in an event of its own. The work
// held is bounded by [WithMaxPendingBytes]; past it the oldest task is
// dropped and its key frees at its lease end, as it would without the
// retries, and a completion larger than the whole bound is kept without
// its body. A store that can fail over ([FailoverBound]) gets a default
// lease and completion retry long enough to outlast its failover.
// [Engine.Close] lands what is pending at shutdown. In exactly-once mode
// a failed commit is not retried: the transaction is gone, the key is
// released and the client gets 503 with Retry-After.
package idem
