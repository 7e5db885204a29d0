// Command gin serves the orders API on Gin, with idem's middleware mounted
// once at the top of the router.
//
//	go run ./examples/gin                # memory store, 127.0.0.1:8080
//	go run ./examples/gin -store redis
package main

import (
	"context"
	"os"

	"github.com/gin-gonic/gin"

	idemgin "github.com/idemkit/idem/adapters/gin"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/examples/internal/app"
)

func main() {
	flags := app.ParseOrders("gin", nil)
	ctx := context.Background()
	store, closeStore := flags.Store.MustOpen(ctx)
	defer closeStore()
	engine, err := idem.New(store, append(flags.Store.Engine(), app.LogEach())...)
	if err != nil {
		app.Fatal(err, false)
	}

	gin.SetMode(gin.ReleaseMode)
	svc := flags.Store.MustOrders(ctx)
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(os.Stderr))
	r.Use(idemgin.Middleware(engine)) // POST and PATCH need an Idempotency-Key
	r.POST("/orders", func(c *gin.Context) { svc.Create(c.Writer, c.Request) })
	r.GET("/orders", func(c *gin.Context) { svc.List(c.Writer, c.Request) })
	r.GET("/orders/:id", func(c *gin.Context) { svc.Get(c.Writer, c.Request, c.Param) })
	r.POST("/orders/:id/payments", func(c *gin.Context) { svc.Pay(c.Writer, c.Request, c.Param) })

	if err := app.Serve(ctx, "orders API on gin", flags.Store.String(), flags.Addr, r, engine.Close); err != nil {
		app.Fatal(err, false)
	}
}
