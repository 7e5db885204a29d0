package idemgrpc_test

import (
	"errors"
	"testing"
	"time"

	idemgrpc "github.com/idemkit/idem/adapters/grpc"
	idemclient "github.com/idemkit/idem/client"
	idem "github.com/idemkit/idem/core"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

func TestBadOptions(t *testing.T) {
	engine := newEngine(t, newMemoryStore(t))
	for name, opt := range map[string]idemgrpc.Option{
		"empty key name":          idemgrpc.WithKeyMetadata(""),
		"key name with a space":   idemgrpc.WithKeyMetadata("idempotency key"),
		"binary key name":         idemgrpc.WithKeyMetadata("key-bin"),
		"reserved key name":       idemgrpc.WithKeyMetadata("grpc-key"),
		"bad replay name":         idemgrpc.WithReplayMetadata("replayed:"),
		"nil key function":        idemgrpc.WithKeyFunc(nil),
		"nil namespace":           idemgrpc.WithNamespace(nil),
		"OK as final":             idemgrpc.WithFinalCodes(codes.OK),
		"a code that is not":      idemgrpc.WithFinalCodes(codes.Code(17)),
		"a pattern without slash": idemgrpc.ForMethod("grpc.testing.TestService/UnaryCall"),
		"a pattern too deep":      idemgrpc.ForMethod("/a/b/c"),
		"a partial wildcard":      idemgrpc.ForMethod("/a/Un*"),
		"an empty pattern":        idemgrpc.ForMethod(""),
		"a type for a service":    idemgrpc.WithResponseType("/a/*", &testpb.Empty{}),
		"a nil type":              idemgrpc.WithResponseType(unaryCall, nil),
		"idem.ForRoute":           idemgrpc.ForMethod("*", idem.ForRoute(idemgrpc.Kind, unaryCall, idem.Skip())),
		"a method not in service": idemgrpc.ForMethod("/grpc.testing.TestService/UnaryCal", idem.Skip()),
	} {
		_, err := idemgrpc.UnaryServerInterceptor(engine, opt)
		if !errors.Is(err, idemgrpc.ErrBadOption) || !errors.Is(err, idem.ErrBadOption) {
			t.Errorf("%s: %v, want ErrBadOption", name, err)
		}
	}
	// A method's options under its skipped service would never apply.
	for name, opts := range map[string][]idemgrpc.Option{
		"a method of a skipped service": {idemgrpc.ForMethod("/grpc.testing.TestService/*", idem.Skip()), idemgrpc.ForMethod(unaryCall, idem.Required())},
		"a service under a skipped *":   {idemgrpc.ForMethod("*", idem.Skip()), idemgrpc.ForMethod("/a.B/*", idem.TTL(time.Hour))},
	} {
		if _, err := idemgrpc.UnaryServerInterceptor(engine, opts...); !errors.Is(err, idemgrpc.ErrBadOption) {
			t.Errorf("%s: %v, want ErrBadOption", name, err)
		}
	}
	if _, err := idemgrpc.UnaryServerInterceptor(nil); !errors.Is(err, idemgrpc.ErrBadOption) {
		t.Errorf("nil engine: %v", err)
	}
	for name, opt := range map[string]idemgrpc.ClientOption{
		"bad key name":       idemgrpc.WithKeyMetadata("a/b"),
		"no attempts":        idemgrpc.WithRetry(idemclient.WithMaxAttempts(0)),
		"zero backoff":       idemgrpc.WithRetry(idemclient.WithBackoff(0, time.Second)),
		"cap below the base": idemgrpc.WithRetry(idemclient.WithBackoff(time.Second, time.Millisecond)),
		"zero budget":        idemgrpc.WithRetry(idemclient.WithBudget(0)),
		"zero delay cap":     idemgrpc.WithRetry(idemclient.WithRetryAfterCap(0)),
		"an HTTP option":     idemgrpc.WithRetry(idemclient.WithKeyHeader("X-Key")),
		"nil method filter":  idemgrpc.WithMethods(nil),
	} {
		if _, err := idemgrpc.UnaryClientInterceptor(opt); !errors.Is(err, idemgrpc.ErrBadOption) || !errors.Is(err, idem.ErrBadOption) {
			t.Errorf("%s: %v, want ErrBadOption", name, err)
		}
	}
	if _, err := idemgrpc.UnaryClientInterceptor(idemgrpc.WithRetry(idemclient.WithMaxAttempts(0))); !errors.Is(err, idemclient.ErrBadOption) {
		t.Errorf("WithRetry: %v, want the idemclient.ErrBadOption it wraps", err)
	}
}

// A bad TTL is refused where it is written: idem.TTL panics with an error
// wrapping idem.ErrBadOption, for gRPC as for HTTP.
func TestBadTTL(t *testing.T) {
	for _, d := range []time.Duration{-time.Hour, 0, idem.MaxLifetime + 1} {
		func() {
			defer func() {
				if err, _ := recover().(error); !errors.Is(err, idem.ErrBadOption) {
					t.Errorf("TTL(%v) panicked with %v, want idem.ErrBadOption", d, err)
				}
			}()
			idemgrpc.ForMethod("*", idem.TTL(d))
		}()
	}
}

func TestGoodOptions(t *testing.T) {
	engine := newEngine(t, newMemoryStore(t))
	if _, err := idemgrpc.UnaryServerInterceptor(engine, nil,
		idemgrpc.WithKeyMetadata("X-Request-ID"),
		idemgrpc.WithReplayMetadata("x-replayed"),
		idemgrpc.WithFinalCodes(codes.InvalidArgument, codes.Unauthenticated),
		idemgrpc.ForMethod("*", idem.Optional(), nil),
		idemgrpc.ForMethod("/a.B/*", idem.TTL(time.Hour)),
		idemgrpc.ForMethod("/a.B/C", idem.Skip()),
		idemgrpc.WithResponseType("/a.B/C", &testpb.Empty{}),
	); err != nil {
		t.Errorf("server: %v", err)
	}
	if _, err := idemgrpc.UnaryClientInterceptor(nil, idemgrpc.WithKeyMetadata("x-request-id"), idemgrpc.WithRetry(idemclient.WithBackoff(time.Second, time.Second))); err != nil {
		t.Errorf("client: %v", err)
	}
}
