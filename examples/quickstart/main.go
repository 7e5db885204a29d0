// Command quickstart is idem's smallest service: an orders API on Chi
// whose POST and PATCH requests need an Idempotency-Key, with the records
// in memory. It imports only Chi, idem's core and its memory store, so a
// fresh machine builds it in seconds.
//
//	go run ./examples/quickstart
//	curl -i -X POST localhost:8080/orders -H 'Idempotency-Key: k1' -d '{"item":"book","quantity":2}'
//
// The other examples serve the same API on every framework and store.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"

	idemchi "github.com/idemkit/idem/adapters/chi"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/examples/internal/orders"
	memstore "github.com/idemkit/idem/stores/memory"
)

const usage = `quickstart serves an orders API on Chi with idem's middleware and the
memory store. POST and PATCH need an Idempotency-Key; a retry with the
same key gets the stored answer with Idempotent-Replayed: true, the same
key with another body 422. Each request logs one "idempotency" line.

Routes:
  POST /orders                  create an order {"item":"book","quantity":2}
  GET  /orders, /orders/{id}    read them (never keyed)
  POST /orders/{id}/payments    pay an order {"amount":19.99}

Try it:
  curl -i -X POST localhost:8080/orders -H 'Idempotency-Key: k1' -d '{"item":"book","quantity":2}'

Usage: quickstart [-addr host:port]
`

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address (port 0 picks a free one)")
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usage)
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	store := memstore.New()
	defer store.Close()
	// One info line per request idem handles, executions and replays too.
	engine, err := idem.New(store, idem.WithObserver(idem.SlogObserverLevel(nil, slog.LevelInfo)))
	if err != nil {
		return err
	}

	svc := orders.New()
	r := chi.NewRouter()
	r.Use(idemchi.Middleware(engine))
	r.Post("/orders", svc.Create)
	r.Get("/orders", svc.List)
	r.Get("/orders/{id}", func(w http.ResponseWriter, r *http.Request) { svc.Get(w, r, param(r)) })
	r.Post("/orders/{id}/payments", func(w http.ResponseWriter, r *http.Request) { svc.Pay(w, r, param(r)) })

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Printf("listening on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		engine.Close(sctx) // lets stored answers still being written land
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func param(r *http.Request) orders.Param {
	return func(name string) string { return chi.URLParam(r, name) }
}
