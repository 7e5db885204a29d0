package idemgrpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
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

// UnaryServerInterceptor returns an interceptor that runs each protected
// unary call at most once per key (Engine.Start) and replays its answer
// (response, header and trailer metadata) to every retry. It returns an
// error wrapping ErrBadOption for a bad option. Chain a recovery
// interceptor outside it: a panic releases the key and goes on.
func UnaryServerInterceptor(engine *idem.Engine, opts ...Option) (grpc.UnaryServerInterceptor, error) {
	if engine == nil {
		return nil, badOption("nil engine")
	}
	s := &serverConfig{
		names:     names{DefaultKeyMetadata, DefaultReplayMetadata},
		namespace: func(context.Context) string { return "" },
		patterns:  map[string][]idem.RouteOption{"": nil},
		types:     map[string]protoreflect.MessageType{},
		engine:    engine,
		routes:    map[string]idem.Route{},
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyServer(s); err != nil {
			return nil, err
		}
	}
	for p := range s.patterns { // each on top of its service's, on top of every method's
		var opts []idem.RouteOption
		for _, q := range slices.Compact([]string{"", p[:strings.LastIndexByte(p, '/')+1], p}) {
			if len(opts) > 0 && len(s.patterns[q]) > 0 && engine.Route(Kind, q, opts...).Skip {
				return nil, badOption("ForMethod options for %s come under a skipping pattern: idem.Skip cannot be undone; skip the other methods one by one", q)
			}
			opts = append(opts, s.patterns[q]...)
		}
		s.routes[p] = engine.Route(Kind, p, opts...)
	}
	where := fmt.Sprintf("the %q metadata", s.keyMD)
	if s.keyFunc != nil {
		where = "the request message or " + where
	}
	s.missing = withInfo(codes.InvalidArgument, "idemgrpc: missing idempotency key: send one in "+where, ReasonMissingKey)
	return s.intercept, nil
}

func (s *serverConfig) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod
	r, ok := s.routes[method]
	if !ok {
		if r, ok = s.routes[method[:strings.LastIndexByte(method, '/')+1]]; !ok {
			r = s.routes[""]
		}
	}
	key, err := "", error(nil)
	if s.keyFunc != nil && !r.Skip {
		key = s.keyFunc(ctx, method, req)
	}
	if key == "" && !r.Skip {
		if vals := metadata.ValueFromIncomingContext(ctx, s.keyMD); len(vals) > 0 {
			key, err = idem.ParseKey(vals)
		}
	}
	named := idem.Op{Kind: Kind, Name: method} // for the events of calls Start does not see
	switch {
	case err != nil:
		_ = s.engine.Report(ctx, named, idem.OutcomeInvalidKey)
		return nil, withInfo(codes.InvalidArgument, err.Error(), ReasonInvalidKey)
	case key == "" && (r.Skip || !r.Required):
		_ = s.engine.Report(ctx, named, idem.OutcomeSkipped)
		return handler(ctx, req)
	case key == "":
		_ = s.engine.Report(ctx, named, idem.OutcomeMissingKey)
		return nil, s.missing
	}
	pm, _ := req.(proto.Message)
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(pm)
	if pm == nil || err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: %s: encoding the request, a %T, for its fingerprint: %v", method, req, err)
	}
	call, stored, err := s.engine.Start(ctx, idem.Op{Namespace: s.namespace(ctx), Kind: Kind, Name: method,
		Key: key, Fingerprint: idem.Fingerprint(Kind, method, body), Retention: r.Retention})
	switch {
	case err != nil:
		return nil, lifecycleError(err)
	case stored != nil:
		return s.replay(ctx, method, stored)
	}
	defer call.Release() // unless completed: a panic, or an error to release the key for
	c := &capture{method: method}
	resp, appErr := handler(grpc.NewContextWithServerTransportStream(call.Context(ctx), c), req)
	env, err := s.settle(method, resp, appErr, c.close())
	if err == nil { // status 200 marks a value, as Engine.Do stores one
		if err := call.Complete(idem.Response{Status: http.StatusOK, Body: env.marshal()}); err != nil {
			return nil, lifecycleError(err)
		}
		err = appErr
	}
	forward(ctx, env.header, env.trailer)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// settle puts the answer to store in env, or returns the error to answer
// with once the key is released: the handler's, if its code is not final.
func (s *serverConfig) settle(method string, resp any, appErr error, env envelope) (envelope, error) {
	m, _ := resp.(proto.Message)
	env.kind = kindMessage
	if appErr != nil {
		st, ok := status.FromError(appErr)
		if !ok {
			st = status.FromContextError(appErr) // as grpc sends it: Canceled, DeadlineExceeded or Unknown
		}
		if c := st.Code(); int(c) >= len(s.final) || !s.final[c] {
			return env, appErr // not final, or a code gRPC does not define
		}
		env.kind, m = kindStatus, st.Proto()
	}
	b, err := proto.Marshal(m)
	if m == nil || err != nil {
		return env, status.Errorf(codes.Internal, "idemgrpc: %s: encoding the answer, a %T: %v", method, resp, err)
	}
	env.typeName, env.payload = string(m.ProtoReflect().Descriptor().FullName()), b
	return env, nil
}

// replay answers from a stored envelope.
func (s *serverConfig) replay(ctx context.Context, method string, stored *idem.Response) (any, error) {
	if stored.BodyOmitted {
		return nil, lifecycleError(idem.ErrResultOmitted)
	}
	env, err := unmarshalEnvelope(stored.Body)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: replaying %s: %v", method, err)
	}
	env.header.Set(s.replayMD, "true")
	forward(ctx, env.header, env.trailer)
	t, ok := s.types[method]
	if env.kind == kindStatus {
		t = (*spb.Status)(nil).ProtoReflect().Type()
	} else if !ok {
		if t, err = protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(env.typeName)); err != nil {
			return nil, status.Errorf(codes.Internal, "idemgrpc: replaying %s: no response type: the stored message %q: %v; give one with WithResponseType", method, env.typeName, err)
		}
	}
	m := t.New().Interface()
	if err := proto.Unmarshal(env.payload, m); err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: replaying %s: decoding the stored %s: %v", method, t.Descriptor().FullName(), err)
	}
	if sp, ok := m.(*spb.Status); ok && env.kind == kindStatus {
		return nil, status.ErrorProto(sp)
	}
	return m, nil
}

// forward hands metadata to the call's real stream, if it takes it.
func forward(ctx context.Context, hdr, trl metadata.MD) {
	if hdr.Len() > 0 {
		_ = grpc.SetHeader(ctx, hdr)
	}
	if trl.Len() > 0 {
		_ = grpc.SetTrailer(ctx, trl)
	}
}

// lifecycleError maps an error of Engine.Start or Call.Complete to a status.
func lifecycleError(err error) error {
	var re *idem.RetryError
	hint := errors.As(err, &re)
	switch {
	case errors.Is(err, idem.ErrInvalidKey):
		return withInfo(codes.InvalidArgument, err.Error(), ReasonInvalidKey)
	case errors.Is(err, idem.ErrInFlight) && hint:
		return withInfo(codes.Aborted, fmt.Sprintf("idemgrpc: a call with this idempotency key is in flight; retry with the same key in %v", re.After), ReasonInFlight, &errdetails.RetryInfo{RetryDelay: durationpb.New(re.After)})
	case errors.Is(err, idem.ErrMismatch):
		return withInfo(codes.FailedPrecondition, "idemgrpc: the idempotency key was already used with a different request", ReasonMismatch)
	case errors.Is(err, idem.ErrResultOmitted):
		return withInfo(codes.DataLoss, "idemgrpc: a call with this idempotency key already ran, but its response was too large to keep and cannot be replayed", ReasonNotKept)
	case errors.Is(err, idem.ErrUndecryptable):
		return withInfo(codes.DataLoss, "idemgrpc: the result stored for this idempotency key cannot be decrypted; it is not replayed, and the call does not run again", ReasonUnreadable)
	case errors.Is(err, idem.ErrNamespaceRequired):
		return withInfo(codes.PermissionDenied, "idemgrpc: the call carries no client identity to scope its idempotency key", ReasonNoNamespace)
	case errors.Is(err, idem.ErrStoreFailure) && hint:
		// Before the context errors: a store call that ran out of the
		// engine's store timeout wraps DeadlineExceeded, while the
		// caller's own end comes as its context's bare error.
		return withInfo(codes.Unavailable, fmt.Sprintf("idemgrpc: the idempotency store is unavailable; retry with the same key in %v", re.After), ReasonStoreFailure, &errdetails.RetryInfo{RetryDelay: durationpb.New(re.After)})
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Internal, "idemgrpc: %v", err)
}

// withInfo returns a status error with an ErrorInfo, then more details.
func withInfo(code codes.Code, msg, reason string, more ...protoadapt.MessageV1) error {
	st, err := status.New(code, msg).WithDetails(append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}}, more...)...)
	if err != nil {
		return status.Error(code, msg) // cannot happen: the details are valid messages
	}
	return st.Err()
}

// capture is the grpc.ServerTransportStream a protected handler sees: it
// keeps the metadata the handler sets, for the store and for the real
// stream once the answer is settled. SendHeader sends nothing early.
type capture struct {
	method     string
	mu         sync.Mutex
	env        envelope // the header and trailer set so far
	sent, done bool     // SendHeader was called (the header is fixed); the handler returned (all fail)
}

func (c *capture) Method() string                  { return c.method }
func (c *capture) SetHeader(md metadata.MD) error  { return c.set("SetHeader", &c.env.header, md) }
func (c *capture) SendHeader(md metadata.MD) error { return c.set("SendHeader", &c.env.header, md) }
func (c *capture) SetTrailer(md metadata.MD) error { return c.set("SetTrailer", &c.env.trailer, md) }

func (c *capture) set(name string, dst *metadata.MD, md metadata.MD) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.sent && dst == &c.env.header {
		return status.Errorf(codes.Internal, "idemgrpc: %s after the header was sent or the handler returned", name)
	}
	if *dst == nil && md.Len() > 0 {
		*dst = make(metadata.MD, md.Len())
	}
	for k, vs := range md {
		dst.Append(k, vs...) // copies the values
	}
	c.sent = c.sent || name == "SendHeader"
	return nil
}

// close ends the capture: the handler's goroutines can set nothing more.
func (c *capture) close() envelope {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	return c.env
}

// The envelope is the Body of the idem.Response stored for an answered
// call: the version (1), the kind (1 a response, 2 a status), and four
// chunks, each a uvarint length and that many bytes: the message's full
// name (google.rpc.Status for a status; "" before), its wire bytes, and
// the header and trailer metadata in idem's header wire format.
type envelope struct {
	kind            byte
	typeName        string
	payload         []byte
	header, trailer metadata.MD
}

const envelopeVersion, kindMessage, kindStatus = 1, 1, 2

var errEnvelope = errors.New("idemgrpc: the stored answer is not one this package wrote")

func (e *envelope) marshal() []byte {
	hdr, trl := idem.AppendHeader(nil, http.Header(e.header)), idem.AppendHeader(nil, http.Header(e.trailer))
	b := append(make([]byte, 0, 2+4*binary.MaxVarintLen64+len(e.typeName)+len(e.payload)+len(hdr)+len(trl)), envelopeVersion, e.kind)
	for _, c := range [][]byte{[]byte(e.typeName), e.payload, hdr, trl} {
		b = append(binary.AppendUvarint(b, uint64(len(c))), c...)
	}
	return b
}

func unmarshalEnvelope(b []byte) (*envelope, error) {
	if len(b) < 2 || b[0] != envelopeVersion || b[1] != kindMessage && b[1] != kindStatus {
		return nil, fmt.Errorf("%w: unknown version or kind", errEnvelope)
	}
	var chunks [4][]byte
	rest := b[2:]
	for i := range chunks {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > uint64(len(rest)-w) {
			return nil, fmt.Errorf("%w: chunk %d is truncated", errEnvelope, i+1)
		}
		chunks[i], rest = rest[w:w+int(n)], rest[w+int(n):]
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last chunk", errEnvelope, len(rest))
	}
	hdr, err := idem.ParseHeader(chunks[2])
	trl, err2 := idem.ParseHeader(chunks[3])
	if err := errors.Join(err, err2); err != nil {
		return nil, fmt.Errorf("%w: %w", errEnvelope, err)
	}
	return &envelope{b[1], string(chunks[0]), chunks[1], metadata.MD(hdr), metadata.MD(trl)}, nil
}
