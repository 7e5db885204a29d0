package idemgrpc

import (
	"context"
	"fmt"
	"strings"
	"time"

	idem "github.com/idemkit/idem/core"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Defaults of the interceptors' options.
const (
	DefaultKeyMetadata    = "idempotency-key"
	DefaultReplayMetadata = "idempotency-replayed"
	DefaultMaxAttempts    = 5
	DefaultBudget         = 30 * time.Second
	DefaultBackoffBase    = 100 * time.Millisecond
	DefaultBackoffCap     = 5 * time.Second
	DefaultRetryDelayCap  = 10 * time.Second
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

// A ClientOption configures the client interceptor. Options are applied
// in order; a nil ClientOption is ignored. Each documents its default.
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

type sharedOption struct {
	server serverOption
	client clientOption
}

func (o sharedOption) applyServer(c *serverConfig) error { return o.server(c) }
func (o sharedOption) applyClient(c *clientConfig) error { return o.client(c) }

// KeyFunc returns the idempotency key carried in a request message, or ""
// when it carries none (the metadata is then used). FieldKey makes one for
// a string field, as in AIP-155's request_id.
type KeyFunc func(ctx context.Context, fullMethod string, req any) string

// A MethodOption sets the policy of the methods ForMethod names.
type MethodOption func(*policy)

// policy is what the server interceptor does for one method.
type policy struct {
	mode      mode
	retention time.Duration // 0: the engine's
	err       error         // a bad MethodOption's, returned by ForMethod
}

type mode uint8

const (
	required mode = iota // a key is required: InvalidArgument without one
	optional             // no key: run unprotected
	skip                 // pass through untouched
)

// Required makes a key required (InvalidArgument without one). It is the
// default.
func Required() MethodOption { return func(p *policy) { p.mode = required } }

// Optional makes the key optional: a call without one runs unprotected.
func Optional() MethodOption { return func(p *policy) { p.mode = optional } }

// Skip makes the methods pass through untouched, as if the interceptor
// were not there (reads, health checks).
func Skip() MethodOption { return func(p *policy) { p.mode = skip } }

// TTL sets how long the methods' answers are replayed, from one
// millisecond to idem.MaxLifetime; ForMethod returns an error wrapping
// ErrBadOption for another value. Default: the engine's retention
// (idem.WithRetention).
func TTL(d time.Duration) MethodOption {
	return func(p *policy) {
		if d < time.Millisecond || d > idem.MaxLifetime {
			p.err = badOption("TTL %v is not between 1ms and %v", d, idem.MaxLifetime)
			return
		}
		p.retention = d
	}
}

type serverConfig struct {
	keyMD, replayMD string
	keyFunc         KeyFunc
	namespace       func(context.Context) string
	final           [17]bool // by codes.Code
	base            []MethodOption
	services        map[string][]MethodOption // "/pkg.Service/"
	methods         map[string][]MethodOption // "/pkg.Service/Method"
	types           map[string]protoreflect.MessageType
}

func defaultServerConfig() serverConfig {
	return serverConfig{
		keyMD:     DefaultKeyMetadata,
		replayMD:  DefaultReplayMetadata,
		namespace: func(context.Context) string { return "" },
		services:  map[string][]MethodOption{},
		methods:   map[string][]MethodOption{},
		types:     map[string]protoreflect.MessageType{},
	}
}

// WithKeyMetadata sets the metadata name that carries the key, on the
// server and on the client. Names are lowercased; one ending in "-bin" or
// starting with "grpc-" is refused. Default: idempotency-key.
func WithKeyMetadata(name string) SharedOption {
	return sharedOption{
		server: func(c *serverConfig) (err error) { c.keyMD, err = mdName("key", name); return err },
		client: func(c *clientConfig) (err error) { c.keyMD, err = mdName("key", name); return err },
	}
}

// WithReplayMetadata sets the header metadata name, with the value
// "true", that marks a replayed answer, on the server and on the client.
// Default: idempotency-replayed.
func WithReplayMetadata(name string) SharedOption {
	return sharedOption{
		server: func(c *serverConfig) (err error) { c.replayMD, err = mdName("replay", name); return err },
		client: func(c *clientConfig) (err error) { c.replayMD, err = mdName("replay", name); return err },
	}
}

// mdName validates a metadata name for a text value.
func mdName(what, name string) (string, error) {
	n := strings.ToLower(name)
	if n == "" {
		return "", badOption("empty %s metadata name", what)
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", badOption("%s metadata name %q: byte %q is not allowed", what, name, c)
		}
	}
	if strings.HasSuffix(n, "-bin") || strings.HasPrefix(n, "grpc-") {
		return "", badOption("%s metadata name %q is reserved (grpc-*) or binary (*-bin)", what, name)
	}
	return n, nil
}

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

// ForMethod sets the policy of the methods pattern names: a full method
// ("/pkg.Service/Method"), a service ("/pkg.Service/*") or every method
// ("*"). A call takes the options of "*", then of its service, then of
// its method, each on top of the one before.
//
//	idemgrpc.ForMethod("/grpc.health.v1.Health/*", idemgrpc.Skip())
//	idemgrpc.ForMethod("/orders.v1.Orders/Quote", idemgrpc.Optional(), idemgrpc.TTL(time.Hour))
func ForMethod(pattern string, opts ...MethodOption) Option {
	return serverOption(func(c *serverConfig) error {
		if p := resolve(opts); p.err != nil {
			return fmt.Errorf("ForMethod(%q): %w", pattern, p.err)
		}
		if err := knownMethod(pattern); err != nil {
			return err
		}
		switch service, method, ok := splitMethod(pattern); {
		case pattern == "*":
			c.base = append(c.base, opts...)
		case ok && method == "*":
			c.services[service] = append(c.services[service], opts...)
		case ok && !strings.Contains(method, "*"):
			c.methods[pattern] = append(c.methods[pattern], opts...)
		default:
			return badOption("method pattern %q is not /pkg.Service/Method, /pkg.Service/* or *", pattern)
		}
		return nil
	})
}

// WithResponseType sets the response type of a method, for replays of
// methods whose service is not in protoregistry.GlobalFiles (see the
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
	if !found {
		return "", "", false
	}
	service, method, found = strings.Cut(rest, "/")
	if !found || service == "" || method == "" || strings.Contains(method, "/") {
		return "", "", false
	}
	return service, method, true
}

type clientConfig struct {
	keyMD, replayMD string
	protect         func(fullMethod string) bool
	maxAttempts     int
	budget          time.Duration
	backoffBase     time.Duration
	backoffCap      time.Duration
	delayCap        time.Duration
}

func defaultClientConfig() clientConfig {
	return clientConfig{
		keyMD:       DefaultKeyMetadata,
		replayMD:    DefaultReplayMetadata,
		maxAttempts: DefaultMaxAttempts,
		budget:      DefaultBudget,
		backoffBase: DefaultBackoffBase,
		backoffCap:  DefaultBackoffCap,
		delayCap:    DefaultRetryDelayCap,
	}
}

// WithMethods sets which unary methods the client interceptor protects, by
// full method name; the others pass through untouched, with no key and no
// retry. Default: every unary method.
func WithMethods(protect func(fullMethod string) bool) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if protect == nil {
			return badOption("nil method filter")
		}
		c.protect = protect
		return nil
	})
}

// WithMaxAttempts sets how many times one logical call is sent at most,
// the first included; 1 turns retries off. Attempts answered "in flight"
// (Aborted, ReasonInFlight) do not count: the budget and the deadline
// bound them. Default: 5.
func WithMaxAttempts(n int) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if n < 1 {
			return badOption("max attempts %d is less than 1", n)
		}
		c.maxAttempts = n
		return nil
	})
}

// WithBudget sets the total time one logical call may take across its
// attempts: no retry is made whose wait would end later than d after the
// first attempt began. The call's deadline bounds it too. Default: 30s.
func WithBudget(d time.Duration) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if d <= 0 {
			return badOption("budget %v is not positive", d)
		}
		c.budget = d
		return nil
	})
}

// WithBackoff sets the backoff used when an error carries no RetryInfo:
// before retry n the client waits a random time between 0 and
// min(maxWait, base·2^(n-1)) ("full jitter"). Default: 100ms and 5s.
func WithBackoff(base, maxWait time.Duration) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if base <= 0 || maxWait < base {
			return badOption("backoff base %v and cap %v: want 0 < base <= cap", base, maxWait)
		}
		c.backoffBase, c.backoffCap = base, maxWait
		return nil
	})
}

// WithRetryDelayCap sets the longest wait a RetryInfo can ask for; a
// longer one is cut to the cap. Default: 10 seconds.
func WithRetryDelayCap(d time.Duration) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if d <= 0 {
			return badOption("retry delay cap %v is not positive", d)
		}
		c.delayCap = d
		return nil
	})
}
