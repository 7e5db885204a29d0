// Command echo serves the orders API on Echo, with idem's middleware
// mounted once for every route.
//
//	go run ./examples/echo               # memory store, 127.0.0.1:8080
//	go run ./examples/echo -store postgres
package main

import (
	"context"
	"net/http"
	"os"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	idemecho "github.com/idemkit/idem/adapters/echo"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/examples/internal/app"
	"github.com/idemkit/idem/examples/internal/orders"
)

func main() {
	flags := app.ParseOrders("echo", nil)
	ctx := context.Background()
	store, closeStore := flags.Store.MustOpen(ctx)
	defer closeStore()
	engine, err := idem.New(store, append(flags.Store.Engine(), app.LogEach())...)
	if err != nil {
		app.Fatal(err, false)
	}

	svc := flags.Store.MustOrders(ctx)
	e := echo.New()
	e.Logger.SetOutput(os.Stderr)
	e.Use(middleware.Recover())
	e.Use(idemecho.Middleware(engine)) // POST and PATCH need an Idempotency-Key
	e.POST("/orders", handle(func(w http.ResponseWriter, r *http.Request, _ orders.Param) { svc.Create(w, r) }))
	e.GET("/orders", handle(func(w http.ResponseWriter, r *http.Request, _ orders.Param) { svc.List(w, r) }))
	e.GET("/orders/:id", handle(svc.Get))
	e.POST("/orders/:id/payments", handle(svc.Pay))

	if err := app.Serve(ctx, "orders API on echo v4", flags.Store.String(), flags.Addr, e, engine.Close); err != nil {
		app.Fatal(err, false)
	}
}

func handle(h func(http.ResponseWriter, *http.Request, orders.Param)) echo.HandlerFunc {
	return func(c echo.Context) error {
		h(c.Response(), c.Request(), c.Param)
		return nil
	}
}
