// Package idemgrpc makes unary gRPC calls (google.golang.org/grpc) safe to
// retry with an idempotency key: the first call with a key runs the
// handler, and every retry with the same key and the same request gets
// the stored answer back instead of running it again.
//
// # Wiring
//
// On the server, chain the interceptor inside a recovery interceptor:
//
//	idemUnary, err := idemgrpc.UnaryServerInterceptor(engine,
//		idemgrpc.WithNamespace(principalOf),
//		idemgrpc.ForMethod("/grpc.health.v1.Health/*", idemgrpc.Skip()),
//	)
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, idemUnary))
//
// On the client, the interceptor gives each call a key and retries it:
//
//	idemUnary, err := idemgrpc.UnaryClientInterceptor()
//	conn, err := grpc.NewClient(addr, grpc.WithChainUnaryInterceptor(idemUnary), creds)
//
// Streaming RPCs are not touched: the package has no stream interceptor,
// and a stream's messages pass through as they would without idem. A
// stream has no single answer to store; make the operations it triggers
// idempotent with Engine.Do inside the handler.
//
// # Keys, scope and fingerprint
//
// The key is the idempotency-key metadata (WithKeyMetadata), parsed as the
// HTTP header is (idem.ParseKey: 1 to 255 printable ASCII characters, sent
// once, optionally quoted). APIs that carry it in the request, as AIP-155's
// request_id, name it with WithKeyFunc (FieldKey reads a string field); a
// key function that returns "" falls back to the metadata. Every unary
// method needs a key unless ForMethod makes it Optional (a call without
// one runs unprotected; AIP-155 makes request_id optional) or Skip (the
// interceptor is not there), by full method, by service or for all.
//
// Each call is one Engine.Do operation: Op.Namespace is WithNamespace's
// function of the context (the authenticated principal, say), Op.Kind is
// "grpc" and Op.Name the full method, so keys are scoped by caller and
// method. The fingerprint is idem.Fingerprint("grpc", full method, the
// deterministic proto encoding of the request): the same key with another
// request message is refused, and unknown fields count.
//
// # Answers, replays and response types
//
// The handler's context carries a grpc.ServerTransportStream of this
// package's that keeps the header and trailer metadata the handler sets
// (grpc.SetHeader, grpc.SendHeader, grpc.SetTrailer); they reach the real
// stream once the answer is stored, so a client that gets an answer and
// retries at once is replayed, never told "in flight". SendHeader
// therefore sends nothing early, and grpc.SetSendCompressor and
// grpc.ClientSupportedCompressors, which need grpc's own stream, fail in
// a protected handler.
//
// The stored value is a small versioned envelope: the response's wire
// bytes and message name, or the google.rpc.Status of a final error, and
// both metadata sets. A replay sets the stored metadata plus
// idempotency-replayed: true (WithReplayMetadata) in the header and
// decodes the response into the method's output type: the one given with
// WithResponseType, else the output of the method's descriptor in
// protoregistry.GlobalFiles (generated code registers its services there),
// else the stored message name in protoregistry.GlobalTypes. A type found
// nowhere is an Internal error that says so, never a panic.
//
// A handler's error releases the key, so a retry runs the handler again,
// unless its code is one WithFinalCodes names: then its status (message
// and details) and metadata are stored and replayed. A handler that
// panics has its key released and the panic goes on to the recovery
// interceptor, which must be outside this one.
//
// # Status codes
//
// What each outcome of the lifecycle (idem.Event.Outcome) answers. The
// interceptor's own errors carry a google.rpc.ErrorInfo with ErrorDomain
// and the reason shown; Aborted and Unavailable carry a google.rpc.RetryInfo
// whose delay is the engine's hint (idem.WithRetryAfter, at most the
// lease left).
//
//	outcome                      code                  details and metadata
//	executed                     the handler's answer  the handler's metadata
//	replayed, replayed_after_    the stored answer     the stored metadata and
//	  wait                       (response or final    idempotency-replayed: true
//	                             status)
//	no key, method Required      InvalidArgument       IDEMPOTENCY_KEY_MISSING
//	invalid key                  InvalidArgument       IDEMPOTENCY_KEY_INVALID
//	conflict, wait_timeout       Aborted               IDEMPOTENCY_KEY_IN_FLIGHT, RetryInfo
//	fingerprint_mismatch         FailedPrecondition    IDEMPOTENCY_KEY_REUSED
//	store_failure (fail closed), Unavailable           IDEMPOTENCY_STORE_UNAVAILABLE,
//	  a failed exactly-once                            RetryInfo
//	  commit
//	released: an error whose     the handler's error   the handler's metadata
//	  code is not final
//	released: a panic            the panic goes on     (the recovery interceptor's)
//	no key, method Optional;     the handler's answer  the handler's metadata
//	  method Skip
//	a stored answer that cannot  Internal              (the reason in the message)
//	  be decoded
//
// Calls refused for their key and calls run unprotected reach the
// engine's observer as no event: Engine.Do reports only the calls it
// runs.
//
// Why these codes: Aborted is gRPC's code for a concurrency conflict the
// caller may retry, and RetryInfo says when. A key reused with another
// request is FailedPrecondition, not InvalidArgument: the request is
// valid on its own and is refused only for the state an earlier call left
// behind, and no retry of it will pass; not Aborted either, which would
// invite one. Unavailable is the code clients already retry, with
// backoff.
//
// # The client
//
// UnaryClientInterceptor gives each logical call one key, a random UUID
// (NewKey), or keeps the one the caller put in the outgoing metadata (an
// empty one means: send once, as it is), and sends it on every attempt:
//
//	the answer                                     retried?
//	Unavailable (the server, or no connection)     yes, honouring RetryInfo
//	Aborted with RetryInfo (in flight, or the      yes, honouring RetryInfo
//	  server asks for a retry)
//	a replayed answer (idempotency-replayed)       no: it is the stored answer
//	any other code, OK included                    no
//	anything once the call's context has ended     no
//
// The wait is RetryInfo's delay, cut to 10 s (WithRetryDelayCap); without
// one, full-jitter exponential backoff, a random time up to
// 100 ms·2^(n-1), at most 5 s (WithBackoff). A call makes at most 5
// attempts (WithMaxAttempts), not counting those answered "in flight"
// (IDEMPOTENCY_KEY_IN_FLIGHT), which are at least the backoff base apart.
// No retry is made whose wait would end past 30 s from the first attempt
// (WithBudget) or at or past the call's deadline. Report(&r) is a call
// option that fills a Result with the key, the attempts and whether the
// answer was a replay.
package idemgrpc
