package idemgrpc

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	idem "github.com/idemkit/idem/core"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// The default metadata names of the key and of the replay mark, and Kind,
// the Op.Kind of the calls the server protects (Op.Name: the full method).
const (
	DefaultKeyMetadata    = "idempotency-key"
	DefaultReplayMetadata = "idempotency-replayed"
	Kind                  = "grpc"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo of the server
// interceptor's own errors; the Reason* constants are their reasons.
const (
	ErrorDomain = "github.com/idemkit/idem"

	ReasonMissingKey   = "IDEMPOTENCY_KEY_MISSING"
	ReasonInvalidKey   = "IDEMPOTENCY_KEY_INVALID"
	ReasonInFlight     = "IDEMPOTENCY_KEY_IN_FLIGHT"
	ReasonMismatch     = "IDEMPOTENCY_KEY_REUSED"
	ReasonStoreFailure = "IDEMPOTENCY_STORE_UNAVAILABLE"
	ReasonNotKept      = "IDEMPOTENCY_RESULT_NOT_KEPT"
	ReasonNoNamespace  = "IDEMPOTENCY_NAMESPACE_REQUIRED"
	ReasonUnreadable   = "IDEMPOTENCY_RESULT_UNREADABLE" // sealed (idem.WithEncryption) under a key the ring lacks
)

// ErrBadOption, which wraps idem.ErrBadOption, is wrapped by bad options' errors.
var ErrBadOption = fmt.Errorf("idemgrpc: %w", idem.ErrBadOption)

func badOption(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadOption}, args...)...)
}

// An Option configures the server interceptor, a ClientOption the client
// interceptor, and a SharedOption (a metadata name) either. Options are
// applied in order; nil ones are ignored. Each documents its default.
type (
	Option       interface{ applyServer(*serverConfig) error }
	ClientOption interface{ applyClient(*clientConfig) error }
	SharedOption interface {
		Option
		ClientOption
	}
)

type (
	serverOption func(*serverConfig) error
	clientOption func(*clientConfig) error
	nameOption   func(*names) error
	names        struct{ keyMD, replayMD string } // the metadata names both interceptors use
)

func (f serverOption) applyServer(c *serverConfig) error { return f(c) }
func (f clientOption) applyClient(c *clientConfig) error { return f(c) }
func (f nameOption) applyServer(c *serverConfig) error   { return f(&c.names) }
func (f nameOption) applyClient(c *clientConfig) error   { return f(&c.names) }

// WithKeyMetadata sets the metadata name of the key, lowercased (not
// grpc-* nor *-bin). Default: idempotency-key.
func WithKeyMetadata(name string) SharedOption {
	return nameOption(func(n *names) (err error) { n.keyMD, err = mdName("key", name); return err })
}

// WithReplayMetadata sets the header metadata name, with the value
// "true", that marks a replayed answer. Default: idempotency-replayed.
func WithReplayMetadata(name string) SharedOption {
	return nameOption(func(n *names) (err error) { n.replayMD, err = mdName("replay", name); return err })
}

// mdName validates a metadata name for a text value.
func mdName(what, name string) (string, error) {
	n := strings.ToLower(name)
	if n == "" || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" || strings.HasSuffix(n, "-bin") || strings.HasPrefix(n, "grpc-") {
		return "", badOption("%s metadata name %q: want letters, digits, '-', '_' and '.', and neither grpc-* nor *-bin", what, name)
	}
	return n, nil
}

// notNil is the error of an option given a nil function, when isNil.
func notNil(isNil bool, what string) error {
	if isNil {
		return badOption("nil %s", what)
	}
	return nil
}

type serverConfig struct {
	names
	keyFunc   KeyFunc
	namespace func(context.Context) string
	final     [17]bool                      // by codes.Code
	patterns  map[string][]idem.RouteOption // "" for every method, "/pkg.Service/" for a service, or a full method
	types     map[string]protoreflect.MessageType
	engine    *idem.Engine
	routes    map[string]idem.Route // the policy's decisions, by the keys of patterns
	missing   error                 // the error of a call without a required key
}

// KeyFunc returns the idempotency key in a request message, or "".
type KeyFunc func(ctx context.Context, fullMethod string, req any) string

// WithKeyFunc sets a function that finds the key in the request message,
// before the metadata, such as FieldKey("request_id"). Default: none.
func WithKeyFunc(fn KeyFunc) Option {
	return serverOption(func(c *serverConfig) error { c.keyFunc = fn; return notNil(fn == nil, "key function") })
}

// FieldKey returns a KeyFunc that reads a string field of the request by
// its proto name (AIP-155's request_id), or a dotted path into singular
// message fields ("order.request_id"); "" when it is absent or empty.
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
// authenticated principal, a tenant), which scopes keys. Default: global.
func WithNamespace(fn func(ctx context.Context) string) Option {
	return serverOption(func(c *serverConfig) error { c.namespace = fn; return notNil(fn == nil, "namespace function") })
}

// WithFinalCodes names the error codes that settle a call: a handler
// error with one is stored (message, details, metadata) and replayed;
// other codes release the key. OK cannot be named. Default: none.
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

// ForMethod gives the methods pattern names idem's per-operation policy,
// as HTTP routes have it: idem.Required, Optional, Skip, TTL. The pattern
// is a full method ("/pkg.Service/Method"), a service ("/pkg.Service/*")
// or "*". A call takes the engine's policy, then the options of "*", of
// its service and of its method, each on top of the one before; as for
// HTTP, nothing undoes Skip, and options under it are refused. So are
// idem.ForRoute and a method its service's registered descriptor lacks.
func ForMethod(pattern string, opts ...idem.RouteOption) Option {
	return serverOption(func(c *serverConfig) error {
		m := fullMethod.FindStringSubmatch(pattern)
		switch {
		case len(idem.RouteRules(asHTTP(opts)...)) > 0:
			return badOption("ForMethod(%q): idem.ForRoute does not apply to gRPC; give each method its own ForMethod", pattern)
		case pattern == "*":
			pattern = ""
		case m != nil && m[2] == "*":
			pattern = pattern[:len(pattern)-1]
		case m == nil || strings.Contains(m[2], "*"):
			return badOption("method pattern %q is not /pkg.Service/Method, /pkg.Service/* or *", pattern)
		case unknownMethod(m[1], m[2]):
			return badOption("ForMethod(%q): service %s has no method %s", pattern, m[1], m[2])
		}
		c.patterns[pattern] = append(c.patterns[pattern], opts...)
		return nil
	})
}

// asHTTP returns opts as the HTTPOptions they also are.
func asHTTP(opts []idem.RouteOption) []idem.HTTPOption {
	hs := make([]idem.HTTPOption, len(opts))
	for i, o := range opts {
		hs[i] = o
	}
	return hs
}

// unknownMethod reports a method its service's registered descriptor lacks.
func unknownMethod(service, method string) bool {
	d, _ := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	sd, ok := d.(protoreflect.ServiceDescriptor)
	return ok && sd.Methods().ByName(protoreflect.Name(method)) == nil
}

// WithResponseType sets the response type of a method, such as
// (*pb.CreateOrderResponse)(nil), for replays of answers whose message
// type is not in protoregistry.GlobalTypes.
func WithResponseType(method string, msg proto.Message) Option {
	return serverOption(func(c *serverConfig) error {
		if m := fullMethod.FindStringSubmatch(method); m == nil || strings.Contains(m[2], "*") || msg == nil {
			return badOption("WithResponseType(%q, %v): want a full method name (/pkg.Service/Method) and a message", method, msg)
		}
		c.types[method] = msg.ProtoReflect().Type()
		return nil
	})
}

// fullMethod matches "/pkg.Service/Method"; its submatches are the service
// and the method.
var fullMethod = regexp.MustCompile(`^/([^/]+)/([^/]+)$`)
