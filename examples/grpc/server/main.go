// Command server serves the gRPC Orders service of package ordersrpc,
// with CreateOrder protected by idem's gRPC interceptor
// (github.com/idemkit/idem/adapters/grpc): a call carries an
// idempotency-key metadata entry, the first call with a key creates the
// order, and a retry with the same key gets the stored answer back, with
// idempotency-replayed: true in its header metadata, instead of a second
// order.
//
//	go run ./examples/grpc/server                 # memory store, 127.0.0.1:50051
//	go run ./examples/grpc/client -key order-1    # in another shell: one order, then a replay
//	go run ./examples/grpc/server -store redis -lose 1
//
// It prints one line, "listening on HOST:PORT", to stdout once it accepts
// calls, and logs one info record per order it creates (a replay runs
// nothing and logs at debug level). With -lose N it drops the answers of
// the first N CreateOrder calls it runs, after the answer was stored, as
// a network that fails after the server did the work: the client's
// interceptor retries with the same key and gets the replay. It stops on
// SIGINT or SIGTERM, letting calls in flight finish.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	idemgrpc "github.com/idemkit/idem/adapters/grpc"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/examples/grpc/internal/ordersrpc"
	"github.com/idemkit/idem/examples/internal/app"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

type flags struct {
	addr  string
	lose  int
	log   app.LogFlags
	store app.StoreFlags
}

const usage = `Usage: go run ./examples/grpc/server [flags]

Serves the gRPC service %s on -addr (plaintext):
CreateOrder({"item": "book", "quantity": 2}) creates an order and is protected
by idem's gRPC interceptor: it needs an idempotency-key metadata entry, and a
retry with the same key gets the stored answer back (header metadata
idempotency-replayed: true) instead of creating a second order. ListOrders
lists the orders and is not protected. The messages are google.protobuf.Struct
and google.protobuf.Empty, so no .proto file or generated code is needed.

Try it, in two shells:

  go run ./examples/grpc/server
  go run ./examples/grpc/client -key order-1   # creates ord_1, retries: a replay
  go run ./examples/grpc/client -key order-1   # same key: replayed, still 1 order
  go run ./examples/grpc/client                # a new key: a second order

Restart the server with -lose 1 to lose the first answer after the order was
stored: the client's interceptor retries and gets the replay.

Flags:
`

func parse() flags {
	var f flags
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), usage, ordersrpc.ServiceName)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.addr, "addr", "127.0.0.1:50051", "listen address (port 0 picks a free one)")
	fs.IntVar(&f.lose, "lose", 0, "drop the answers of the first N CreateOrder calls that run, after they were stored, as a flaky network would")
	f.log.Register(fs)
	f.store.Register(fs, "grpc")
	fs.Parse(os.Args[1:])
	switch {
	case fs.NArg() > 0:
		fs.Usage()
		os.Exit(2)
	case f.lose < 0:
		app.Fatal(fmt.Errorf("-lose %d: want 0 or more", f.lose), true)
	}
	if err := f.store.Validate(); err != nil {
		app.Fatal(err, true)
	}
	f.log.Install()
	return f
}

func main() {
	f := parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	store, closeStore := f.store.MustOpen(ctx)
	defer closeStore()
	engine, err := idem.New(store, f.store.Engine()...)
	if err != nil {
		app.Fatal(err, false)
	}
	protect, err := idemgrpc.UnaryServerInterceptor(engine,
		idemgrpc.ForMethod(ordersrpc.ListOrders, idem.Skip()), // a read
		idemgrpc.WithResponseType(ordersrpc.CreateOrder, &structpb.Struct{}),
	)
	if err != nil {
		app.Fatal(err, false)
	}
	// The first interceptor is the outermost: recovery sees every panic,
	// and the lost answers are lost after idem stored them.
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, loseFirst(f.lose), protect))
	ordersrpc.Register(srv, newService())
	if err := serve(ctx, srv, f.addr, f.store.String()); err != nil {
		app.Fatal(err, false)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := engine.Close(cctx); err != nil {
		app.Fatal(err, false)
	}
}

// serve listens on addr, prints "listening on HOST:PORT", and serves
// until ctx ends; then it stops gracefully, or at once after 10 seconds.
func serve(ctx context.Context, srv *grpc.Server, addr, store string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Printf("listening on %s\n", ln.Addr())
	slog.Info("serving", "program", "orders service on gRPC", "service", ordersrpc.ServiceName,
		"store", store, "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		srv.Stop()
	}
	return <-errc
}

// recovery turns a handler's panic into an Internal error. It must be
// outside idem's interceptor, which releases the key and lets the panic
// go on.
func recovery(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			slog.ErrorContext(ctx, "panic", "method", info.FullMethod, "panic", p)
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	return handler(ctx, req)
}

// loseFirst returns an interceptor that replaces the answers of the first
// n CreateOrder calls that ran (not replays) with Unavailable.
func loseFirst(n int) grpc.UnaryServerInterceptor {
	var left atomic.Int64
	left.Store(int64(n))
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		var ran atomic.Bool
		resp, err := handler(context.WithValue(ctx, ranKey{}, &ran), req)
		if err == nil && ran.Load() && info.FullMethod == ordersrpc.CreateOrder && left.Add(-1) >= 0 {
			slog.InfoContext(ctx, "answer lost on purpose (-lose)", "method", info.FullMethod)
			return nil, status.Error(codes.Unavailable, "the answer was lost on the way back (-lose)")
		}
		return resp, err
	}
}

// ranKey is the context key of loseFirst's flag that the handler ran.
type ranKey struct{}

// markRan tells loseFirst that the handler ran.
func markRan(ctx context.Context) {
	if ran, ok := ctx.Value(ranKey{}).(*atomic.Bool); ok {
		ran.Store(true)
	}
}

// service keeps the orders in memory.
type service struct {
	mu     sync.Mutex
	orders []*structpb.Struct
}

func newService() *service { return &service{} }

// CreateOrder creates {"item": string, "quantity": whole number > 0}.
func (s *service) CreateOrder(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	item := req.GetFields()["item"].GetStringValue()
	qty := req.GetFields()["quantity"].GetNumberValue()
	switch {
	case item == "":
		return nil, status.Error(codes.InvalidArgument, `"item" must be a non-empty string`)
	case qty <= 0 || qty != float64(int64(qty)):
		return nil, status.Error(codes.InvalidArgument, `"quantity" must be a whole number greater than 0`)
	}
	markRan(ctx)
	s.mu.Lock()
	id := "ord_" + strconv.Itoa(len(s.orders)+1)
	order, err := structpb.NewStruct(map[string]any{
		"id": id, "item": item, "quantity": qty, "created_at": time.Now().UTC().Format(time.RFC3339Nano),
	})
	if err == nil {
		s.orders = append(s.orders, order)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	slog.InfoContext(ctx, "order created", "id", id, "item", item, "quantity", qty)
	return order, nil
}

// ListOrders answers {"orders": [...], "count": n}.
func (s *service) ListOrders(context.Context, *emptypb.Empty) (*structpb.Struct, error) {
	s.mu.Lock()
	list := make([]*structpb.Value, len(s.orders))
	for i, o := range s.orders {
		list[i] = structpb.NewStructValue(o)
	}
	s.mu.Unlock()
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"orders": structpb.NewListValue(&structpb.ListValue{Values: list}),
		"count":  structpb.NewNumberValue(float64(len(list))),
	}}, nil
}
