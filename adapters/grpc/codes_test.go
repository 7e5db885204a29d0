package idemgrpc_test

import (
	"context"
	"testing"
	"time"

	idemgrpc "github.com/idemkit/idem/adapters/grpc"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestUnknownCodePassesThrough: a handler's status with a code outside
// gRPC's seventeen (passed on from an upstream service, say) is not
// final: it reaches the client as it is and releases the key.
func TestUnknownCodePassesThrough(t *testing.T) {
	e, err := idem.New(newMemoryStore(t))
	if err != nil {
		t.Fatal(err)
	}
	ic, err := idemgrpc.UnaryServerInterceptor(e)
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs("idempotency-key", "k1"))
	runs := 0
	handler := func(ctx context.Context, req any) (any, error) {
		runs++
		return nil, status.Error(codes.Code(42), "custom")
	}
	for range 2 {
		_, err = ic(ctx, &testpb.SimpleRequest{}, &grpc.UnaryServerInfo{FullMethod: unaryCall}, handler)
		if st := status.Convert(err); st.Code() != codes.Code(42) || st.Message() != "custom" {
			t.Fatalf("got %v, want the handler's code 42", err)
		}
	}
	if runs != 2 {
		t.Errorf("the handler ran %d times; a non-final code releases the key, so 2", runs)
	}
}

// blockingClaims is a store whose Claim answers only when its context
// ends: a store slower than the engine's store timeout.
type blockingClaims struct{ idem.Store }

func (s blockingClaims) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	<-ctx.Done()
	return store.ClaimResult{}, ctx.Err()
}

// TestStoreTimeoutIsUnavailable: a store call that runs out of the
// engine's store timeout, while the caller's deadline is still ahead, is a
// store failure: Unavailable with RetryInfo, which the client retries.
func TestStoreTimeoutIsUnavailable(t *testing.T) {
	e, err := idem.New(blockingClaims{newMemoryStore(t)}, idem.WithStoreTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ic, err := idemgrpc.UnaryServerInterceptor(e)
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs("idempotency-key", "k1"))
	_, err = ic(ctx, &testpb.SimpleRequest{}, &grpc.UnaryServerInfo{FullMethod: unaryCall}, func(ctx context.Context, req any) (any, error) {
		return &testpb.SimpleResponse{}, nil
	})
	st := status.Convert(err)
	var retry bool
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			retry = true
		}
	}
	if st.Code() != codes.Unavailable || !retry {
		t.Errorf("a store timeout answered %v %q (details %v), want Unavailable with RetryInfo", st.Code(), st.Message(), st.Details())
	}
}
