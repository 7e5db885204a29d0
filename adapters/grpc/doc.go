// Package idemgrpc makes unary gRPC calls (google.golang.org/grpc) safe to
// retry with an idempotency key: the first call with a key runs the
// handler, and every retry with the same key and the same request gets
// the stored answer back instead of running it again.
//
// On the server, chain UnaryServerInterceptor inside a recovery
// interceptor; on the client, UnaryClientInterceptor gives each call a
// key and retries it:
//
//	idemUnary, err := idemgrpc.UnaryServerInterceptor(engine,
//		idemgrpc.WithNamespace(principalOf),
//		idemgrpc.ForMethod("/grpc.health.v1.Health/*", idem.Skip()),
//	)
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, idemUnary))
//
// Streaming RPCs pass through untouched: a stream has no single answer to
// store; make what it triggers idempotent with Engine.Do in the handler.
//
// # Keys, policy and scope
//
// The key is the idempotency-key metadata, parsed as the HTTP header is
// (idem.ParseKey), or a field of the request (WithKeyFunc, FieldKey). The
// per-method policy is idem's, as for HTTP routes (ForMethod with
// idem.Required, idem.Optional, idem.Skip, idem.TTL): a key is required
// unless the engine's default or ForMethod says otherwise. Each call is
// one operation of Kind "grpc" named by its full method, scoped by
// WithNamespace's caller; the fingerprint is idem.Fingerprint over the
// deterministic proto encoding of the request.
//
// # Answers and replays
//
// The handler sees a grpc.ServerTransportStream that keeps the header and
// trailer metadata it sets; they reach the real stream once the answer is
// stored, so a client that retries at once is replayed, never told "in
// flight". SendHeader therefore sends nothing early, and
// grpc.SetSendCompressor fails in a protected handler. The store keeps
// the response's wire bytes and message name, or the google.rpc.Status of
// an error whose code WithFinalCodes names, with both metadata sets. A
// replay sets them with idempotency-replayed: true in the header and
// decodes the response into the type WithResponseType gives, else the
// stored name's in protoregistry.GlobalTypes, else answers Internal.
// Another error releases the key; so does a panic, which goes on.
//
// # Status codes
//
// The interceptor's own errors carry a google.rpc.ErrorInfo with
// ErrorDomain and the reason shown; Aborted and Unavailable also carry a
// google.rpc.RetryInfo with the engine's hint (idem.WithRetryAfter).
//
//	outcome                      code                  details and metadata
//	executed                     the handler's answer  the handler's metadata
//	replayed                     the stored answer     the stored metadata and
//	                                                   idempotency-replayed: true
//	no key, method Required      InvalidArgument       IDEMPOTENCY_KEY_MISSING
//	invalid key                  InvalidArgument       IDEMPOTENCY_KEY_INVALID
//	conflict, wait_timeout       Aborted               IDEMPOTENCY_KEY_IN_FLIGHT, RetryInfo
//	fingerprint_mismatch         FailedPrecondition    IDEMPOTENCY_KEY_REUSED
//	result too large to keep     DataLoss              IDEMPOTENCY_RESULT_NOT_KEPT
//	no namespace, but required   PermissionDenied      IDEMPOTENCY_NAMESPACE_REQUIRED
//	store_failure, a failed      Unavailable           IDEMPOTENCY_STORE_UNAVAILABLE,
//	  exactly-once commit                              RetryInfo
//	released (a code not final)  the handler's error   the handler's metadata
//	no key, Optional; Skip       the handler's answer  the handler's metadata
//
// Aborted is gRPC's code for a conflict the caller may retry. A key reused
// with another request is FailedPrecondition: the request is valid, but
// the state an earlier call left refuses it, and no retry will pass.
//
// # The client
//
// UnaryClientInterceptor keeps the caller's key from the outgoing
// metadata (an empty one: send once, as it is) or makes one
// (idemclient.NewKey), and retries Unavailable, and Aborted with a
// RetryInfo (in flight), with that key. It retries as the HTTP client
// does, under the same RetryPolicy (WithRetry): RetryInfo's delay up to a
// cap, else full-jitter backoff; at most 5 attempts, not counting those
// answered in flight; within a budget and the call's deadline. A replayed
// answer and any other code are returned at once. Report(&r) fills a
// Result with the key, the attempts and whether the answer was a replay.
package idemgrpc
