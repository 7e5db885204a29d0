package idemgrpc

import (
	"context"
	"fmt"
	"slices"
	"strings"

	idem "github.com/idemkit/idem/core"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// The default metadata names of the key and of the replay mark.
const (
	DefaultKeyMetadata    = "idempotency-key"
	DefaultReplayMetadata = "idempotency-replayed"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo the server
// interceptor attaches to its own errors; the Reason* constants are their
// reasons.
const ErrorDomain = "github.com/idemkit/idem"

// The reasons of the server interceptor's errors, in their ErrorInfo.
const (
	ReasonMissingKey   = "IDEMPOTENCY_KEY_MISSING"
	ReasonInvalidKey   = "IDEMPOTENCY_KEY_INVALID"
	ReasonInFlight     = "IDEMPOTENCY_KEY_IN_FLIGHT"
	ReasonMismatch     = "IDEMPOTENCY_KEY_REUSED"
	ReasonStoreFailure = "IDEMPOTENCY_STORE_UNAVAILABLE"
	ReasonNotKept      = "IDEMPOTENCY_RESULT_NOT_KEPT"
	ReasonNoNamespace  = "IDEMPOTENCY_NAMESPACE_REQUIRED"
)

// ErrBadOption is wrapped by every error UnaryServerInterceptor and
// UnaryClientInterceptor return for a bad option. It wraps
// idem.ErrBadOption.
var ErrBadOption = fmt.Errorf("idemgrpc: %w", idem.ErrBadOption)

func badOption(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadOption}, args...)...)
}

// An Option configures the server interceptor. Options are applied in
// order; a nil Option is ignored. Each documents its default.
type Option interface{ applyServer(*serverConfig) error }

// A ClientOption configures the client interceptor, likewise.
type ClientOption interface{ applyClient(*clientConfig) error }

// A SharedOption configures either interceptor: a metadata name both must
// agree on.
type SharedOption interface {
	Option
	ClientOption
}

type serverOption func(*serverConfig) error

func (f serverOption) applyServer(c *serverConfig) error { return f(c) }

type clientOption func(*clientConfig) error

func (f clientOption) applyClient(c *clientConfig) error { return f(c) }

// names are the metadata names both interceptors use.
type names struct{ keyMD, replayMD string }

type nameOption func(*names) error

func (f nameOption) applyServer(c *serverConfig) error { return f(&c.names) }
func (f nameOption) applyClient(c *clientConfig) error { return f(&c.names) }

// WithKeyMetadata sets the metadata name that carries the key, on the
// server and on the client. Names are lowercased; one ending in "-bin" or
// starting with "grpc-" is refused. Default: idempotency-key.
func WithKeyMetadata(name string) SharedOption {
	return nameOption(func(n *names) (err error) { n.keyMD, err = mdName("key", name); return err })
}

// WithReplayMetadata sets the header metadata name, with the value
// "true", that marks a replayed answer, on the server and on the client.
// Default: idempotency-replayed.
func WithReplayMetadata(name string) SharedOption {
	return nameOption(func(n *names) (err error) { n.replayMD, err = mdName("replay", name); return err })
}

// mdName validates a metadata name for a text value.
func mdName(what, name string) (string, error) {
	n := strings.ToLower(name)
	if n == "" {
		return "", badOption("empty %s metadata name", what)
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", badOption("%s metadata name %q: byte %q is not allowed", what, name, c)
		}
	}
	if strings.HasSuffix(n, "-bin") || strings.HasPrefix(n, "grpc-") {
		return "", badOption("%s metadata name %q is reserved (grpc-*) or binary (*-bin)", what, name)
	}
	return n, nil
}

type serverConfig struct {
	names
	keyFunc   KeyFunc
	namespace func(context.Context) string
	final     [17]bool // by codes.Code
	base      []idem.RouteOption
	services  map[string][]idem.RouteOption // by service name
	methods   map[string][]idem.RouteOption // by full method
	types     map[string]protoreflect.MessageType
}

// KeyFunc returns the idempotency key carried in a request message, or ""
// when it carries none (the metadata is then used). FieldKey makes one for
// a string field, as in AIP-155's request_id.
type KeyFunc func(ctx context.Context, fullMethod string, req any) string

// WithKeyFunc sets a function that finds the key in the request message;
// when it returns "", the key metadata is used. It runs before the
// handler, for every protected call. Default: none (metadata only).
//
//	idemgrpc.WithKeyFunc(idemgrpc.FieldKey("request_id")) // AIP-155
func WithKeyFunc(fn KeyFunc) Option {
	return serverOption(func(c *serverConfig) error {
		if fn == nil {
			return badOption("nil key function")
		}
		c.keyFunc = fn
		return nil
	})
}

// FieldKey returns a KeyFunc that reads the key from a string field of the
// request message, by its proto name, as AIP-155 puts it in request_id;
// a dotted path reaches into singular message fields. A message without
// such a field, or with it empty, gives "" (the metadata is then used).
//
//	idemgrpc.WithKeyFunc(idemgrpc.FieldKey("order.request_id"))
func FieldKey(path string) KeyFunc {
	names := strings.Split(path, ".")
	return func(_ context.Context, _ string, req any) string {
		pm, ok := req.(proto.Message)
		if !ok {
			return ""
		}
		m := pm.ProtoReflect()
		for i, name := range names {
			fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
			switch {
			case fd == nil || fd.Cardinality() == protoreflect.Repeated:
				return ""
			case i == len(names)-1 && fd.Kind() == protoreflect.StringKind:
				return m.Get(fd).String()
			case i == len(names)-1 || fd.Kind() != protoreflect.MessageKind || !m.Has(fd):
				return ""
			}
			m = m.Get(fd).Message()
		}
		return ""
	}
}

// WithNamespace sets the function that names the caller of an RPC (the
// authenticated principal, a tenant): keys are scoped by it, so two
// callers never share one. "" is global. Default: global for every call.
func WithNamespace(fn func(ctx context.Context) string) Option {
	return serverOption(func(c *serverConfig) error {
		if fn == nil {
			return badOption("nil namespace function")
		}
		c.namespace = fn
		return nil
	})
}

// WithFinalCodes names the error codes that settle a call: a handler
// error with one of them is stored, with its message, details and
// metadata, and replayed to every retry; other codes release the key, so
// a retry runs the handler again. OK cannot be named. Default: none.
//
//	idemgrpc.WithFinalCodes(codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists)
func WithFinalCodes(cs ...codes.Code) Option {
	return serverOption(func(c *serverConfig) error {
		for _, code := range cs {
			if code == codes.OK || code > codes.Unauthenticated {
				return badOption("%v cannot be a final code", code)
			}
			c.final[code] = true
		}
		return nil
	})
}

// ForMethod gives the methods pattern names the per-operation policy
// every transport of idem shares: idem.Required, idem.Optional,
// idem.Skip, idem.TTL. The pattern is a full method
// ("/pkg.Service/Method"), a service ("/pkg.Service/*") or every method
// ("*"). A call takes the engine's policy (Engine.Policy: a key is
// required unless idem.WithOptionalKey), then the options of "*", of its
// service and of its method, each on top of the one before. A method its
// service's descriptor in protoregistry.GlobalFiles does not have is an
// error (a typo would leave the real method on the default policy), and
// so is idem.ForRoute among opts: give each method its own ForMethod.
//
//	idemgrpc.ForMethod("/grpc.health.v1.Health/*", idem.Skip())
//	idemgrpc.ForMethod("/orders.v1.Orders/Quote", idem.Optional(), idem.TTL(time.Hour))
func ForMethod(pattern string, opts ...idem.RouteOption) Option {
	return serverOption(func(c *serverConfig) error {
		if len(idem.RouteRules(opts...)) > 0 {
			return badOption("ForMethod(%q): idem.ForRoute does not apply to gRPC; give each method its own ForMethod", pattern)
		}
		service, method, ok := splitMethod(pattern)
		switch {
		case pattern == "*":
			c.base = append(c.base, opts...)
		case ok && method == "*":
			c.services[service] = append(c.services[service], opts...)
		case ok && !strings.Contains(method, "*"):
			d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
			if sd, isService := d.(protoreflect.ServiceDescriptor); err == nil && isService && sd.Methods().ByName(protoreflect.Name(method)) == nil {
				return badOption("ForMethod(%q): service %s has no method %s", pattern, service, method)
			}
			c.methods[pattern] = append(c.methods[pattern], opts...)
		default:
			return badOption("method pattern %q is not /pkg.Service/Method, /pkg.Service/* or *", pattern)
		}
		return nil
	})
}

// routes resolves the ForMethod options into the decisions the server
// interceptor makes per call: for every method, per service, per method.
func (c *serverConfig) routes(e *idem.Engine) (def idem.Route, services, methods map[string]idem.Route) {
	def = e.Policy(c.base...).Route(Kind, "*")
	services = make(map[string]idem.Route, len(c.services))
	for name, o := range c.services {
		services[name] = e.Policy(slices.Concat(c.base, o)...).Route(Kind, "/"+name+"/*")
	}
	methods = make(map[string]idem.Route, len(c.methods))
	for full, o := range c.methods {
		service, _, _ := splitMethod(full)
		methods[full] = e.Policy(slices.Concat(c.base, c.services[service], o)...).Route(Kind, full)
	}
	return def, services, methods
}

// WithResponseType sets the response type of a method, for replays of
// answers whose message type is not in protoregistry.GlobalTypes (see the
// package documentation). msg is a message of the type, such as
// (*pb.CreateOrderResponse)(nil).
func WithResponseType(fullMethod string, msg proto.Message) Option {
	return serverOption(func(c *serverConfig) error {
		if _, m, ok := splitMethod(fullMethod); !ok || strings.Contains(m, "*") {
			return badOption("%q is not a full method name (/pkg.Service/Method)", fullMethod)
		}
		if msg == nil {
			return badOption("nil response message for %s", fullMethod)
		}
		c.types[fullMethod] = msg.ProtoReflect().Type()
		return nil
	})
}

// splitMethod splits "/pkg.Service/Method" into its service ("pkg.Service")
// and method ("Method").
func splitMethod(full string) (service, method string, ok bool) {
	rest, found := strings.CutPrefix(full, "/")
	service, method, found2 := strings.Cut(rest, "/")
	if !found || !found2 || service == "" || method == "" || strings.Contains(method, "/") {
		return "", "", false
	}
	return service, method, true
}
