package idemgrpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"sync"

	idem "github.com/idemkit/idem/core"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Kind is the Op.Kind of every call the server interceptor protects;
// Op.Name is the call's full method name.
const Kind = "grpc"

// UnaryServerInterceptor returns an interceptor that runs each protected
// unary call at most once per key (Engine.Start) and replays its answer
// (response, header and trailer metadata) to every retry, with
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
	cfg := serverConfig{
		names:     names{DefaultKeyMetadata, DefaultReplayMetadata},
		namespace: func(context.Context) string { return "" },
		services:  map[string][]idem.RouteOption{},
		methods:   map[string][]idem.RouteOption{},
		types:     map[string]protoreflect.MessageType{},
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyServer(&cfg); err != nil {
			return nil, err
		}
	}
	s := &server{engine: engine, cfg: cfg}
	s.def, s.services, s.methods = cfg.routes(engine)
	where := fmt.Sprintf("the %q metadata", cfg.keyMD)
	if cfg.keyFunc != nil {
		where = "the request message or " + where
	}
	s.missing = withInfo(codes.InvalidArgument, "idemgrpc: missing idempotency key: send one in "+where, ReasonMissingKey)
	return s.intercept, nil
}

type server struct {
	engine            *idem.Engine
	cfg               serverConfig
	def               idem.Route
	services, methods map[string]idem.Route
	missing           error
}

// route returns the policy's decision for a full method.
func (s *server) route(fullMethod string) idem.Route {
	if r, ok := s.methods[fullMethod]; ok {
		return r
	}
	if len(s.services) > 0 {
		if service, _, ok := splitMethod(fullMethod); ok {
			if r, ok := s.services[service]; ok {
				return r
			}
		}
	}
	return s.def
}

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod
	r := s.route(method)
	named := idem.Op{Kind: Kind, Name: method} // for the events of calls Start does not see
	if r.Skip {
		_ = s.engine.Report(ctx, named, idem.OutcomeSkipped)
		return handler(ctx, req)
	}
	key, err := s.key(ctx, method, req)
	switch {
	case err != nil:
		_ = s.engine.Report(ctx, named, idem.OutcomeInvalidKey)
		return nil, withInfo(codes.InvalidArgument, err.Error(), ReasonInvalidKey)
	case key == "" && !r.Required:
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
	call, stored, err := s.engine.Start(ctx, idem.Op{
		Namespace:   s.cfg.namespace(ctx),
		Kind:        Kind,
		Name:        method,
		Key:         key,
		Fingerprint: idem.Fingerprint(Kind, method, body),
		Retention:   r.Retention,
	})
	switch {
	case err != nil:
		return nil, lifecycleError(err)
	case stored != nil:
		return s.replay(ctx, method, stored)
	}
	defer call.Release() // the handler panicked: release the key, and let the panic go on
	c := &capture{method: method}
	resp, appErr := handler(grpc.NewContextWithServerTransportStream(call.Context(ctx), c), req)
	hdr, trl := c.close()
	env, err := s.settle(method, resp, appErr, envelope{header: hdr, trailer: trl})
	if err != nil {
		call.Release()
		forward(ctx, hdr, trl)
		return nil, err
	}
	// Status 200 marks a value, as Engine.Do stores one.
	if err := call.Complete(idem.Response{Status: http.StatusOK, Body: env.marshal()}); err != nil {
		return nil, lifecycleError(err)
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

// settle fills env with a handler's answer to store, or returns the error
// to answer with after releasing the key: the handler's, when its code is
// not final.
func (s *server) settle(method string, resp any, appErr error, env envelope) (envelope, error) {
	var m proto.Message
	if appErr != nil {
		st, ok := status.FromError(appErr)
		if !ok {
			st = status.FromContextError(appErr) // as grpc sends it: Canceled, DeadlineExceeded or Unknown
		}
		if !s.cfg.final[st.Code()] {
			return env, appErr
		}
		env.kind, m = kindStatus, st.Proto()
	} else if m, _ = resp.(proto.Message); m == nil {
		return env, status.Errorf(codes.Internal, "idemgrpc: %s: the response, a %T, is not a proto message", method, resp)
	} else {
		env.kind, env.typeName = kindMessage, string(m.ProtoReflect().Descriptor().FullName())
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return env, status.Errorf(codes.Internal, "idemgrpc: %s: encoding the answer: %v", method, err)
	}
	env.payload = b
	return env, nil
}

// replay answers from a stored envelope, decoding a response into the
// type WithResponseType gave, else the stored message name's in
// protoregistry.GlobalTypes.
func (s *server) replay(ctx context.Context, method string, stored *idem.Response) (any, error) {
	if stored.BodyOmitted {
		return nil, lifecycleError(idem.ErrResultOmitted)
	}
	env, err := unmarshalEnvelope(stored.Body)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: replaying %s: %v", method, err)
	}
	env.header.Set(s.cfg.replayMD, "true")
	forward(ctx, env.header, env.trailer)
	if env.kind == kindStatus {
		var sp spb.Status
		if err := proto.Unmarshal(env.payload, &sp); err != nil {
			return nil, status.Errorf(codes.Internal, "idemgrpc: replaying %s: decoding the stored status: %v", method, err)
		}
		return nil, status.ErrorProto(&sp)
	}
	t, ok := s.cfg.types[method]
	if !ok {
		if t, err = protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(env.typeName)); err != nil {
			return nil, status.Errorf(codes.Internal, "idemgrpc: replaying %s: no response type: the stored message %q: %v; give one with WithResponseType", method, env.typeName, err)
		}
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

// lifecycleError maps an error of Engine.Start's or Call.Complete's to a
// status. The store's error stays in the engine's event; the client is
// told only what it can act on.
func lifecycleError(err error) error {
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
	st, err := status.New(code, msg).WithDetails(append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}}, more...)...)
	if err != nil {
		return status.Error(code, msg) // cannot happen: the details are valid messages
	}
	return st.Err()
}

// capture is the grpc.ServerTransportStream a protected handler sees: it
// keeps the header and trailer metadata the handler sets, so they can be
// stored with the answer, and hands them to the real stream only once the
// answer is settled. SendHeader sends nothing early: for a unary call the
// header goes out with the response.
type capture struct {
	method          string
	mu              sync.Mutex
	header, trailer metadata.MD
	headerSent      bool // SendHeader was called: later header calls fail, as on a real stream
	done            bool // the handler returned: every call fails
}

func (c *capture) Method() string                  { return c.method }
func (c *capture) SetHeader(md metadata.MD) error  { return c.set("SetHeader", &c.header, md, false) }
func (c *capture) SendHeader(md metadata.MD) error { return c.set("SendHeader", &c.header, md, true) }
func (c *capture) SetTrailer(md metadata.MD) error { return c.set("SetTrailer", &c.trailer, md, false) }

// set merges md into *dst, copying the values, and marks the header sent
// with send.
func (c *capture) set(name string, dst *metadata.MD, md metadata.MD, send bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.headerSent && dst == &c.header {
		return status.Errorf(codes.Internal, "idemgrpc: %s after the header was sent or the handler returned", name)
	}
	if *dst == nil && md.Len() > 0 {
		*dst = make(metadata.MD, md.Len())
	}
	for k, vs := range md {
		dst.Append(k, vs...)
	}
	c.headerSent = c.headerSent || send
	return nil
}

// close ends the capture and returns what was set; the handler's
// goroutines can set nothing more.
func (c *capture) close() (header, trailer metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	return c.header, c.trailer
}

// The envelope is the value the server interceptor stores for one
// answered call, in the Body of an idem.Response with status 200:
//
//	version  byte 1
//	kind     byte: 1 a response message, 2 an error status
//	chunk    the response message's full name ("" for a status)
//	chunk    the message's wire bytes, or the google.rpc.Status's
//	chunk    the header metadata, in idem's header wire format
//	chunk    the trailer metadata, likewise
//
// where a chunk is a uvarint length and that many bytes.
type envelope struct {
	kind            kind
	typeName        string
	payload         []byte
	header, trailer metadata.MD
}

type kind byte

const (
	envelopeVersion      = 1
	kindMessage     kind = 1
	kindStatus      kind = 2
)

var errEnvelope = errors.New("idemgrpc: the stored answer is not one this package wrote")

func (e *envelope) marshal() []byte {
	hdr, trl := idem.AppendHeader(nil, http.Header(e.header)), idem.AppendHeader(nil, http.Header(e.trailer))
	b := make([]byte, 2, 2+4*binary.MaxVarintLen64+len(e.typeName)+len(e.payload)+len(hdr)+len(trl))
	b[0], b[1] = envelopeVersion, byte(e.kind)
	for _, c := range [][]byte{[]byte(e.typeName), e.payload, hdr, trl} {
		b = append(binary.AppendUvarint(b, uint64(len(c))), c...)
	}
	return b
}

func unmarshalEnvelope(b []byte) (*envelope, error) {
	if len(b) < 2 || b[0] != envelopeVersion {
		return nil, fmt.Errorf("%w: unknown version", errEnvelope)
	}
	e := &envelope{kind: kind(b[1])}
	if e.kind != kindMessage && e.kind != kindStatus {
		return nil, fmt.Errorf("%w: unknown kind %d", errEnvelope, b[1])
	}
	b = b[2:]
	var chunks [4][]byte
	for i := range chunks {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return nil, fmt.Errorf("%w: chunk %d is truncated", errEnvelope, i+1)
		}
		chunks[i], b = b[w:w+int(n)], b[w+int(n):]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last chunk", errEnvelope, len(b))
	}
	e.typeName, e.payload = string(chunks[0]), chunks[1]
	for i, md := range []*metadata.MD{&e.header, &e.trailer} {
		h, err := idem.ParseHeader(chunks[2+i])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errEnvelope, err)
		}
		*md = metadata.MD(h)
	}
	return e, nil
}
