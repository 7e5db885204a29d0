package idemgrpc_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	idemgrpc "github.com/idemkit/idem/adapters/grpc"
	idemclient "github.com/idemkit/idem/client"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// payments is a service whose UnaryCall charges a card: it must run once
// per key however often the client retries.
type payments struct {
	testpb.UnimplementedTestServiceServer
	charges atomic.Int64
}

func (p *payments) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	n := p.charges.Add(1)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-charge-id", fmt.Sprint(n)))
	return &testpb.SimpleResponse{Username: fmt.Sprintf("charge %d", n)}, nil
}

// A server with the interceptor behind a recovery interceptor, and a
// client whose interceptor gives each call a key. The retry, sent with
// the first call's key, gets the stored answer and its metadata; the
// card is charged once.
func Example() {
	store := memstore.New()
	defer store.Close()
	engine, err := idem.New(store, idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	serverIdem, err := idemgrpc.UnaryServerInterceptor(engine)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, serverIdem))
	svc := &payments{}
	testpb.RegisterTestServiceServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	clientIdem, err := idemgrpc.UnaryClientInterceptor()
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(clientIdem))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	ctx := context.Background()
	var first idemgrpc.Result
	resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, idemgrpc.Report(&first))
	fmt.Println(resp.GetUsername(), err, "replayed:", first.Replayed)

	// The same logical call again, as after a lost answer: same key.
	var again idemgrpc.Result
	var hdr metadata.MD
	ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.DefaultKeyMetadata, first.Key)
	resp, err = client.UnaryCall(ctx, &testpb.SimpleRequest{}, idemgrpc.Report(&again), grpc.Header(&hdr))
	fmt.Println(resp.GetUsername(), err, "replayed:", again.Replayed, "x-charge-id:", hdr.Get("x-charge-id"))
	fmt.Println("charges:", svc.charges.Load())
	// Output:
	// charge 1 <nil> replayed: false
	// charge 1 <nil> replayed: true x-charge-id: [1]
	// charges: 1
}

// The server's options: keys scoped by the caller, the key taken from an
// AIP-155 request_id field when the message has one, health checks and a
// read skipped, a method whose key is optional, and two codes that are
// stored as the final answer rather than releasing the key.
func ExampleUnaryServerInterceptor() {
	store := memstore.New()
	defer store.Close()
	engine, err := idem.New(store)
	if err != nil {
		log.Fatal(err)
	}
	principal := func(ctx context.Context) string {
		v := metadata.ValueFromIncomingContext(ctx, "x-api-key-id") // set by an auth interceptor
		if len(v) == 1 {
			return v[0]
		}
		return ""
	}
	serverIdem, err := idemgrpc.UnaryServerInterceptor(engine,
		idemgrpc.WithNamespace(principal),
		idemgrpc.WithKeyFunc(idemgrpc.FieldKey("request_id")),
		idemgrpc.ForMethod("/grpc.health.v1.Health/*", idem.Skip()),
		idemgrpc.ForMethod("/orders.v1.Orders/GetOrder", idem.Skip()),
		idemgrpc.ForMethod("/orders.v1.Orders/Quote", idem.Optional(), idem.TTL(time.Hour)),
		idemgrpc.WithFinalCodes(codes.FailedPrecondition, codes.AlreadyExists),
	)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, serverIdem))
	_ = srv
}

// What a client learns from an error the server interceptor made: its
// ErrorInfo reason, and how long RetryInfo says to wait.
func ExampleErrorDomain() {
	// err as a call gets it while another call with its key is in flight.
	st, _ := status.New(codes.Aborted, "in flight").WithDetails(
		&errdetails.ErrorInfo{Domain: idemgrpc.ErrorDomain, Reason: idemgrpc.ReasonInFlight},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(250 * time.Millisecond)},
	)
	err := st.Err()

	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == idemgrpc.ErrorDomain {
				fmt.Println(status.Code(err), d.GetReason())
			}
		case *errdetails.RetryInfo:
			fmt.Println("retry in", d.GetRetryDelay().AsDuration())
		}
	}
	// Output:
	// Aborted IDEMPOTENCY_KEY_IN_FLIGHT
	// retry in 250ms
}

// The client's options: only the method that creates orders is protected,
// and the retry policy is the HTTP client's (idemclient), here with four
// attempts within ten seconds.
func ExampleUnaryClientInterceptor() {
	clientIdem, err := idemgrpc.UnaryClientInterceptor(
		idemgrpc.WithMethods(func(m string) bool { return m == "/orders.v1.Orders/CreateOrder" }),
		idemgrpc.WithRetry(idemclient.WithMaxAttempts(4), idemclient.WithBudget(10*time.Second)),
	)
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient("orders.internal:443",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(clientIdem))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
}
