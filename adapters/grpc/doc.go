// Package idemgrpc makes unary gRPC calls safe to retry with an
// idempotency key: the first call with a key runs the handler, and every
// retry with the same key and request gets the stored answer instead.
//
//	idemUnary, err := idemgrpc.UnaryServerInterceptor(engine, idemgrpc.WithNamespace(principalOf),
//		idemgrpc.ForMethod("/grpc.health.v1.Health/*", idem.Skip()))
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, idemUnary))
//
// The key is the idempotency-key metadata, parsed as the HTTP header is,
// or a request field (WithKeyFunc). Methods follow idem's per-operation
// policy, as HTTP routes do (ForMethod). A call is an operation of Kind
// "grpc" named by its full method and scoped by WithNamespace, whose
// fingerprint covers the request's deterministic encoding. That encoding
// is stable for one build of the message: during a rolling deploy that
// adds a field, a retry that reaches a server of the other version, with
// the new field set, may be refused as key reused (FailedPrecondition);
// it never runs twice. Streams pass.
//
// The handler's metadata reaches the real stream once the answer is
// stored (SendHeader sends nothing early; grpc.SetSendCompressor fails).
// The store keeps it with the response, or with the status of an error
// whose code WithFinalCodes names; another error or a panic releases the
// key. A replay adds idempotency-replayed: true, and decodes into the
// type WithResponseType gives, else the stored name's in GlobalTypes.
//
// The interceptor's own errors carry a google.rpc.ErrorInfo of ErrorDomain
// with the reason shown, and Aborted and Unavailable a google.rpc.RetryInfo
// with the engine's hint (idem.WithRetryAfter):
//
//	outcome                      code                  details and metadata
//	executed                     the handler's answer  the handler's metadata
//	replayed                     the stored answer     the stored metadata, idempotency-replayed
//	no key, method Required      InvalidArgument       IDEMPOTENCY_KEY_MISSING
//	invalid key                  InvalidArgument       IDEMPOTENCY_KEY_INVALID
//	conflict, wait_timeout       Aborted               IDEMPOTENCY_KEY_IN_FLIGHT, RetryInfo
//	fingerprint_mismatch         FailedPrecondition    IDEMPOTENCY_KEY_REUSED (no retry passes)
//	result too large to keep     DataLoss              IDEMPOTENCY_RESULT_NOT_KEPT
//	no namespace, but required   PermissionDenied      IDEMPOTENCY_NAMESPACE_REQUIRED
//	store_failure, failed commit Unavailable           IDEMPOTENCY_STORE_UNAVAILABLE, RetryInfo
//	released (code not final)    the handler's error   the handler's metadata
//	no key, Optional; Skip       the handler's answer  the handler's metadata
//
// UnaryClientInterceptor keeps the caller's key (an empty one: sent once)
// or makes one, and retries Unavailable and Aborted-with-RetryInfo with
// it under the HTTP client's retry policy (WithRetry, idemclient).
package idemgrpc
