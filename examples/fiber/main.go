// Command fiber serves the orders API on Fiber v3, natively on fasthttp,
// with idem's middleware on each route (Fiber routes lazily, so app.Use
// middleware cannot know the route template).
//
//	go run ./examples/fiber                # memory store, 127.0.0.1:8080
//	go run ./examples/fiber -store postgres -exactly-once
package main

import (
	"context"
	"net/http"

	"github.com/gofiber/fiber/v3"
	fiberrecover "github.com/gofiber/fiber/v3/middleware/recover"

	idemfiber "github.com/idemkit/idem/adapters/fiber"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/examples/internal/app"
	"github.com/idemkit/idem/examples/internal/fiberapp"
	"github.com/idemkit/idem/examples/internal/orders"
)

func main() {
	flags := app.ParseOrders("fiber", nil)
	ctx := context.Background()
	store, closeStore := flags.Store.MustOpen(ctx)
	defer closeStore()
	engine, err := idem.New(store, append(flags.Store.Engine(), app.LogEach())...)
	if err != nil {
		app.Fatal(err, false)
	}

	svc := flags.Store.MustOrders(ctx)
	f := fiber.New()
	f.Use(fiberrecover.New())
	mw := idemfiber.Middleware(engine) // POST and PATCH need an Idempotency-Key
	f.Post("/orders", mw, fiberapp.Handler(func(w http.ResponseWriter, r *http.Request, _ func(string) string) { svc.Create(w, r) }))
	f.Get("/orders", fiberapp.Handler(func(w http.ResponseWriter, r *http.Request, _ func(string) string) { svc.List(w, r) }))
	f.Get("/orders/:id", fiberapp.Handler(func(w http.ResponseWriter, r *http.Request, p func(string) string) { svc.Get(w, r, orders.Param(p)) }))
	f.Post("/orders/:id/payments", mw, fiberapp.Handler(func(w http.ResponseWriter, r *http.Request, p func(string) string) {
		svc.Pay(w, r, orders.Param(p))
	}))
	if err := idemfiber.CheckRoutes(f); err != nil {
		app.Fatal(err, false)
	}

	if err := app.ServeWith(ctx, "orders API on fiber", flags.Store.String(), flags.Addr, fiberapp.Server{App: f}, engine.Close); err != nil {
		app.Fatal(err, false)
	}
}
