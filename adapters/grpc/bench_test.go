package idemgrpc_test

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	idemgrpc "github.com/idemkit/idem/adapters/grpc"
	idem "github.com/idemkit/idem/core"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// The benchmarks run UnaryCall with 1 KiB in and out on the memory store:
// in-process, the interceptor called directly against a handler that
// returns a ready response ("bare" is the handler alone, so the others'
// difference is the interceptor's whole cost); and over loopback TCP,
// a real server without the interceptor and with it. "first" sends a new
// key each time (claim, run, store); "replay" the same key (claim finds
// the record, replay).

var (
	benchReq  = &testpb.SimpleRequest{Payload: &testpb.Payload{Body: bytes.Repeat([]byte("i"), 1024)}}
	benchResp = &testpb.SimpleResponse{Payload: &testpb.Payload{Body: bytes.Repeat([]byte("o"), 1024)}, Username: "receipt"}
)

// nullStream is a ServerTransportStream that drops what it is given.
type nullStream struct{}

func (nullStream) Method() string               { return unaryCall }
func (nullStream) SetHeader(metadata.MD) error  { return nil }
func (nullStream) SendHeader(metadata.MD) error { return nil }
func (nullStream) SetTrailer(metadata.MD) error { return nil }

func BenchmarkInterceptor(b *testing.B) {
	handler := func(ctx context.Context, _ any) (any, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-order", "42"))
		return benchResp, nil
	}
	unary, err := idemgrpc.UnaryServerInterceptor(newEngine(b, newMemoryStore(b)))
	if err != nil {
		b.Fatal(err)
	}
	info := &grpc.UnaryServerInfo{FullMethod: unaryCall}
	base := grpc.NewContextWithServerTransportStream(b.Context(), nullStream{})
	withKey := func(k string) context.Context {
		return metadata.NewIncomingContext(base, metadata.Pairs(idemgrpc.DefaultKeyMetadata, k))
	}

	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		ctx := withKey("k")
		for b.Loop() {
			if _, err := handler(ctx, benchReq); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n++
			if _, err := unary(withKey("first-"+strconv.Itoa(n)), benchReq, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		b.ReportAllocs()
		ctx := withKey("replay")
		if _, err := unary(ctx, benchReq, info, handler); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := unary(ctx, benchReq, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkLoopback(b *testing.B) {
	svc := &service{}
	svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-order", "42"))
		return benchResp, nil
	}
	skipAll := []idemgrpc.Option{idemgrpc.ForMethod("*", idem.Skip())}
	bare := testpb.NewTestServiceClient(dial(b, serve(b, newEngine(b, newMemoryStore(b)), svc, skipAll)))
	protected := testpb.NewTestServiceClient(dial(b, serve(b, newEngine(b, newMemoryStore(b)), svc, nil)))
	ctx := b.Context()

	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		ctx := metadata.AppendToOutgoingContext(ctx, idemgrpc.DefaultKeyMetadata, "k")
		for b.Loop() {
			if _, err := bare.UnaryCall(ctx, benchReq); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n++
			ctx := metadata.AppendToOutgoingContext(ctx, idemgrpc.DefaultKeyMetadata, "first-"+strconv.Itoa(n))
			if _, err := protected.UnaryCall(ctx, benchReq); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		b.ReportAllocs()
		ctx := metadata.AppendToOutgoingContext(ctx, idemgrpc.DefaultKeyMetadata, "replay")
		for b.Loop() {
			if _, err := protected.UnaryCall(ctx, benchReq); err != nil {
				b.Fatal(err)
			}
		}
	})
}
