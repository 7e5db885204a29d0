// Command nethttp serves the orders API on the standard library's
// ServeMux, with its POST routes protected by idem's net/http middleware.
//
//	go run ./examples/nethttp            # memory store, 127.0.0.1:8080
//	go run ./examples/nethttp -store redis -addr 127.0.0.1:0
package main

import (
	"context"
	"net/http"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/examples/internal/app"
)

func main() {
	flags := app.ParseOrders("nethttp", nil)
	ctx := context.Background()
	store, closeStore := flags.Store.MustOpen(ctx)
	defer closeStore()
	engine, err := idem.New(store, append(flags.Store.Engine(), app.LogEach())...)
	if err != nil {
		app.Fatal(err, false)
	}

	svc := flags.Store.MustOrders(ctx)
	protect := engine.Middleware() // Idempotency-Key required
	mux := http.NewServeMux()
	mux.Handle("POST /orders", protect(http.HandlerFunc(svc.Create)))
	mux.HandleFunc("GET /orders", svc.List)
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) { svc.Get(w, r, r.PathValue) })
	mux.Handle("POST /orders/{id}/payments", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		svc.Pay(w, r, r.PathValue)
	})))

	if err := app.Serve(ctx, "orders API on net/http", flags.Store.String(), flags.Addr, mux, engine.Close); err != nil {
		app.Fatal(err, false)
	}
}
