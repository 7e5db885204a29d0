package idemgrpc

import (
	"context"
	"errors"
	"fmt"

	idem "github.com/idemkit/idem/core"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Kind is the Op.Kind of every call the server interceptor runs through
// Engine.Do; Op.Name is the call's full method name.
const Kind = "grpc"

// UnaryServerInterceptor returns an interceptor that runs each protected
// unary call at most once per key through engine.Do and replays its
// answer (response, header and trailer metadata) to every retry, with
// idempotency-replayed: true in the header. The key comes from the
// idempotency-key metadata or WithKeyFunc. It returns an error wrapping
// ErrBadOption for a bad option. Chain a recovery interceptor outside it:
// a panic releases the key and goes on. The package documentation has
// the status table.
//
//	idemUnary, err := idemgrpc.UnaryServerInterceptor(engine, idemgrpc.WithNamespace(principal))
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, idemUnary))
func UnaryServerInterceptor(engine *idem.Engine, opts ...Option) (grpc.UnaryServerInterceptor, error) {
	if engine == nil {
		return nil, badOption("nil engine")
	}
	cfg := defaultServerConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyServer(&cfg); err != nil {
			return nil, err
		}
	}
	s := &server{
		engine:   engine,
		cfg:      cfg,
		def:      resolve(cfg.base),
		services: make(map[string]policy, len(cfg.services)),
		methods:  make(map[string]policy, len(cfg.methods)),
		types:    responseTypes{fixed: cfg.types},
	}
	for name, o := range cfg.services {
		s.services[name] = resolve(cfg.base, o)
	}
	for full, o := range cfg.methods {
		service, _, _ := splitMethod(full)
		s.methods[full] = resolve(cfg.base, cfg.services[service], o)
	}
	where := fmt.Sprintf("the %q metadata", cfg.keyMD)
	if cfg.keyFunc != nil {
		where = "the request message or " + where
	}
	s.missing = withInfo(codes.InvalidArgument, "idemgrpc: missing idempotency key: send one in "+where, ReasonMissingKey)
	return s.intercept, nil
}

// resolve applies lists of options, in order, to the default policy.
func resolve(lists ...[]MethodOption) policy {
	var p policy
	for _, l := range lists {
		for _, o := range l {
			if o != nil {
				o(&p)
			}
		}
	}
	return p
}

type server struct {
	engine   *idem.Engine
	cfg      serverConfig
	def      policy
	services map[string]policy // by service name
	methods  map[string]policy // by full method
	types    responseTypes
	missing  error
}

// policy returns the policy of a full method.
func (s *server) policy(fullMethod string) policy {
	if p, ok := s.methods[fullMethod]; ok {
		return p
	}
	if len(s.services) > 0 {
		if service, _, ok := splitMethod(fullMethod); ok {
			if p, ok := s.services[service]; ok {
				return p
			}
		}
	}
	return s.def
}

// released carries a handler's error out of Engine.Do so that the key is
// released. It has no Unwrap: an idem.FinalError inside must not make Do
// store the error's text.
type released struct{ err error }

func (r released) Error() string { return r.err.Error() }

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod
	p := s.policy(method)
	named := idem.Op{Kind: Kind, Name: method} // for the events of calls Do does not run
	if p.mode == skip {
		_ = s.engine.Report(ctx, named, idem.OutcomeSkipped)
		return handler(ctx, req)
	}
	key, err := s.key(ctx, method, req)
	switch {
	case err != nil:
		_ = s.engine.Report(ctx, named, idem.OutcomeInvalidKey)
		return nil, withInfo(codes.InvalidArgument, err.Error(), ReasonInvalidKey)
	case key == "" && p.mode == optional:
		_ = s.engine.Report(ctx, named, idem.OutcomeSkipped)
		return handler(ctx, req)
	case key == "":
		_ = s.engine.Report(ctx, named, idem.OutcomeMissingKey)
		return nil, s.missing
	}
	pm, ok := req.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "idemgrpc: %s: the request, a %T, is not a proto message", method, req)
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(pm)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: %s: encoding the request for its fingerprint: %v", method, err)
	}
	op := idem.Op{
		Namespace:   s.cfg.namespace(ctx),
		Kind:        Kind,
		Name:        method,
		Key:         key,
		Fingerprint: idem.Fingerprint(Kind, method, body),
		Retention:   p.retention,
	}

	// What the handler answered, when it ran here.
	var (
		resp     any
		appErr   error
		hdr, trl metadata.MD
	)
	value, replayed, err := s.engine.Do(ctx, op, func(ctx context.Context) ([]byte, error) {
		c := &capture{method: method}
		resp, appErr = handler(grpc.NewContextWithServerTransportStream(ctx, c), req)
		hdr, trl = c.close()
		return s.settle(method, resp, appErr, hdr, trl)
	})
	var rel released
	switch {
	case errors.As(err, &rel):
		forward(ctx, hdr, trl)
		return nil, rel.err
	case err != nil:
		return nil, s.lifecycleError(err)
	case replayed:
		return s.replay(ctx, method, value)
	}
	forward(ctx, hdr, trl)
	if appErr != nil {
		return nil, appErr
	}
	return resp, nil
}

// key returns the call's key: from the key function, else from the
// metadata; "" when there is none.
func (s *server) key(ctx context.Context, method string, req any) (string, error) {
	if s.cfg.keyFunc != nil {
		if k := s.cfg.keyFunc(ctx, method, req); k != "" {
			return k, nil
		}
	}
	vals := metadata.ValueFromIncomingContext(ctx, s.cfg.keyMD)
	if len(vals) == 0 {
		return "", nil
	}
	return idem.ParseKey(vals)
}

// settle decides what becomes of a handler's answer: the envelope to
// store, or a released error that frees the key.
func (s *server) settle(method string, resp any, appErr error, hdr, trl metadata.MD) ([]byte, error) {
	env := envelope{header: hdr, trailer: trl}
	if appErr != nil {
		st := appStatus(appErr)
		if !s.cfg.final[st.Code()] {
			return nil, released{appErr}
		}
		b, err := proto.Marshal(st.Proto())
		if err != nil {
			return nil, released{status.Errorf(codes.Internal, "idemgrpc: %s: encoding the final status: %v", method, err)}
		}
		env.kind, env.payload = kindStatus, b
		return env.marshal(), nil
	}
	m, ok := resp.(proto.Message)
	if !ok {
		return nil, released{status.Errorf(codes.Internal, "idemgrpc: %s: the response, a %T, is not a proto message", method, resp)}
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, released{status.Errorf(codes.Internal, "idemgrpc: %s: encoding the response: %v", method, err)}
	}
	env.kind, env.typeName, env.payload = kindMessage, string(m.ProtoReflect().Descriptor().FullName()), b
	return env.marshal(), nil
}

// appStatus is the status grpc sends for a handler's error: its own, or
// Canceled or DeadlineExceeded for a context's error, or Unknown.
func appStatus(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}

// replay answers from a stored envelope.
func (s *server) replay(ctx context.Context, method string, value []byte) (any, error) {
	env, err := unmarshalEnvelope(value)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: replaying %s: %v", method, err)
	}
	hdr := env.header
	hdr.Set(s.cfg.replayMD, "true")
	forward(ctx, hdr, env.trailer)
	if env.kind == kindStatus {
		var sp spb.Status
		if err := proto.Unmarshal(env.payload, &sp); err != nil {
			return nil, status.Errorf(codes.Internal, "idemgrpc: replaying %s: decoding the stored status: %v", method, err)
		}
		return nil, status.ErrorProto(&sp)
	}
	t, err := s.types.find(method, env.typeName)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	m := t.New().Interface()
	if err := proto.Unmarshal(env.payload, m); err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: replaying %s: decoding the stored %s: %v", method, t.Descriptor().FullName(), err)
	}
	return m, nil
}

// forward hands metadata to the call's real stream. It fails only when an
// interceptor outside already sent the header, as the handler's own
// SetHeader would have; the answer goes out regardless.
func forward(ctx context.Context, hdr, trl metadata.MD) {
	if hdr.Len() > 0 {
		_ = grpc.SetHeader(ctx, hdr)
	}
	if trl.Len() > 0 {
		_ = grpc.SetTrailer(ctx, trl)
	}
}

// lifecycleError maps an error of Engine.Do's own to a status. The
// store's error stays in the engine's event; the client is told only
// what it can act on.
func (s *server) lifecycleError(err error) error {
	var re *idem.RetryError
	hasHint := errors.As(err, &re)
	switch {
	case errors.Is(err, idem.ErrInvalidKey):
		return withInfo(codes.InvalidArgument, err.Error(), ReasonInvalidKey)
	case errors.Is(err, idem.ErrInFlight) && hasHint:
		return withInfo(codes.Aborted, fmt.Sprintf("idemgrpc: a call with this idempotency key is in flight; retry with the same key in %v", re.After),
			ReasonInFlight, &errdetails.RetryInfo{RetryDelay: durationpb.New(re.After)})
	case errors.Is(err, idem.ErrMismatch):
		return withInfo(codes.FailedPrecondition, "idemgrpc: the idempotency key was already used with a different request", ReasonMismatch)
	case errors.Is(err, idem.ErrResultOmitted):
		// The call ran once; what it answered was too large to keep.
		return withInfo(codes.DataLoss, "idemgrpc: a call with this idempotency key already ran, but its response was too large to keep and cannot be replayed", ReasonNotKept)
	case errors.Is(err, idem.ErrNamespaceRequired):
		return withInfo(codes.PermissionDenied, "idemgrpc: the call carries no client identity to scope its idempotency key", ReasonNoNamespace)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, idem.ErrStoreFailure) && hasHint:
		return withInfo(codes.Unavailable, fmt.Sprintf("idemgrpc: the idempotency store is unavailable; retry with the same key in %v", re.After),
			ReasonStoreFailure, &errdetails.RetryInfo{RetryDelay: durationpb.New(re.After)})
	}
	return status.Errorf(codes.Internal, "idemgrpc: %v", err)
}

// withInfo returns a status error with an ErrorInfo of ErrorDomain and
// reason, then more details.
func withInfo(code codes.Code, msg, reason string, more ...protoadapt.MessageV1) error {
	st := status.New(code, msg)
	withDetails, err := st.WithDetails(append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}}, more...)...)
	if err != nil {
		return st.Err() // cannot happen: the details are valid messages
	}
	return withDetails.Err()
}
