// Command client calls CreateOrder on the gRPC example server
// (examples/grpc/server) through idem's gRPC client interceptor
// (github.com/idemkit/idem/adapters/grpc), which sends an idempotency key
// with the call and retries it, with the same key, when the answer is
// Unavailable or "in flight". It sends the same call -n times (2 by
// default) with one key, so the second is answered from the server's
// store:
//
//	go run ./examples/grpc/server &
//	go run ./examples/grpc/client -key order-1
//
// It prints one line per call (the order, the key, the attempts the
// interceptor made and whether the answer was a replay) and then the
// number of orders on the server (ListOrders), and logs one info record
// per call. It exits with status 1 when a call fails.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	idemgrpc "github.com/idemkit/idem/adapters/grpc"
	idemclient "github.com/idemkit/idem/client"
	"github.com/idemkit/idem/examples/grpc/internal/ordersrpc"
	"github.com/idemkit/idem/examples/internal/app"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

type flags struct {
	addr, key, item string
	quantity, n     int
	timeout         time.Duration
	log             app.LogFlags
}

const usage = `Usage: go run ./examples/grpc/client [flags]

Calls CreateOrder on the gRPC example server (go run ./examples/grpc/server)
-n times with one idempotency key, through idem's gRPC client interceptor,
which retries a call with the same key when the answer is lost (Unavailable)
or the key is still in flight. The first call creates the order; the others
are answered from the server's store (replayed: true) with the same order.
Then it prints how many orders the server holds (ListOrders).

Try it:

  go run ./examples/grpc/server &
  go run ./examples/grpc/client -key order-1   # executed, then replayed
  go run ./examples/grpc/client -key order-1   # replayed: still 1 order
  go run ./examples/grpc/client -item pen      # a new random key: a new order

Flags:
`

func parse() flags {
	var f flags
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.addr, "addr", "127.0.0.1:50051", "the server's address, HOST:PORT (the line it prints: listening on HOST:PORT)")
	fs.StringVar(&f.key, "key", "", "the idempotency key of the calls (default: a new random UUID per run)")
	fs.StringVar(&f.item, "item", "book", "the order's item")
	fs.IntVar(&f.quantity, "quantity", 2, "the order's quantity; 0 or less shows the server's InvalidArgument")
	fs.IntVar(&f.n, "n", 2, "how many times to send the call with the key: the first runs, the others are replays")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "deadline of each call, retries included")
	f.log.Register(fs)
	fs.Parse(os.Args[1:])
	if fs.NArg() > 0 || f.n < 1 || f.timeout <= 0 {
		fs.Usage()
		os.Exit(2)
	}
	if f.key == "" {
		f.key = idemclient.NewKey()
	}
	f.log.Install()
	return f
}

func main() {
	f := parse()
	retrying, err := idemgrpc.UnaryClientInterceptor(
		idemgrpc.WithMethods(func(m string) bool { return m == ordersrpc.CreateOrder }),
		// The retry policy and its options are the HTTP client's (idemclient).
		idemgrpc.WithRetry(idemclient.WithMaxAttempts(5), idemclient.WithBudget(f.timeout)),
	)
	if err != nil {
		app.Fatal(err, false)
	}
	conn, err := grpc.NewClient(f.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(retrying))
	if err != nil {
		app.Fatal(fmt.Errorf("-addr %q: %w", f.addr, err), true)
	}
	defer conn.Close()
	client := ordersrpc.NewClient(conn)
	req, err := structpb.NewStruct(map[string]any{"item": f.item, "quantity": f.quantity})
	if err != nil {
		app.Fatal(err, false)
	}
	for i := 1; i <= f.n; i++ {
		if err := create(client, f, i, req); err != nil {
			app.Fatal(err, false)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	list, err := client.ListOrders(ctx)
	if err != nil {
		app.Fatal(fmt.Errorf("ListOrders: %w", err), false)
	}
	fmt.Printf("orders on the server: %d\n", int(list.GetFields()["count"].GetNumberValue()))
}

// create sends call i of CreateOrder with the key and prints its answer.
func create(client *ordersrpc.Client, f flags, i int, req *structpb.Struct) error {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	// The interceptor keeps a key the caller put in the metadata; without
	// one it would make a new key per call.
	ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.DefaultKeyMetadata, f.key)
	var r idemgrpc.Result
	order, err := client.CreateOrder(ctx, req, idemgrpc.Report(&r))
	if err != nil {
		slog.Error("CreateOrder failed", "call", i, "key", f.key, "attempts", r.Attempts, "err", err)
		return fmt.Errorf("CreateOrder (call %d, key %s, %d attempts): %w", i, f.key, r.Attempts, err)
	}
	fields := order.GetFields()
	id := fields["id"].GetStringValue()
	fmt.Printf("call %d: order %s (%g x %s) key %s attempts %d replayed %t\n",
		i, id, fields["quantity"].GetNumberValue(), fields["item"].GetStringValue(), f.key, r.Attempts, r.Replayed)
	slog.Info("CreateOrder", "call", i, "order", id, "key", f.key, "attempts", r.Attempts, "replayed", r.Replayed)
	return nil
}
