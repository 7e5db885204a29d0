package idemechov5_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	idemechov5 "github.com/idemkit/idem/adapters/echov5"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
)

// The middleware mounted once for every route, with per-route options given
// by route template; and mounted per group and per route, with the options
// given where the routes are declared.
func Example() {
	store := memstore.New()
	defer store.Close()
	engine, err := idem.New(store)
	if err != nil {
		panic(err)
	}
	orders := 0
	createOrder := func(c *echo.Context) error {
		orders++
		return c.JSON(http.StatusCreated, map[string]int{"id": orders})
	}
	pay := func(c *echo.Context) error { return c.String(http.StatusCreated, "paid") }

	// Globally.
	e := echo.New()
	e.Use(middleware.Recover()) // outermost: a panic releases the key, then 500
	e.Use(idemechov5.Middleware(engine,
		idem.ForRoute(http.MethodPost, "/payments", idem.TTL(time.Hour)),
	))
	e.POST("/orders", createOrder)
	e.POST("/payments", pay)

	// Per group and per route.
	api := echo.New()
	api.Use(middleware.Recover())
	v1 := api.Group("/v1", idemechov5.Middleware(engine))
	v1.POST("/orders", createOrder)
	api.POST("/payments", pay, idemechov5.Middleware(engine, idem.TTL(time.Hour)))

	send := func(h http.Handler, target, key string) {
		r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(`{"item":"book"}`))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d %s replayed=%q\n", w.Code, strings.TrimSpace(w.Body.String()), w.Header().Get("Idempotent-Replayed"))
	}
	send(e, "/orders", "order-1")
	send(e, "/orders", "order-1") // a retry: replayed, the handler does not run again
	send(e, "/orders", "order-2")
	send(api, "/v1/orders", "order-1") // another route: another scope
	send(api, "/payments", "pay-1")
	send(api, "/payments", "pay-1")
	// Output:
	// 201 {"id":1} replayed=""
	// 201 {"id":1} replayed="true"
	// 201 {"id":2} replayed=""
	// 201 {"id":3} replayed=""
	// 201 paid replayed=""
	// 201 paid replayed="true"
}

// A handler's returned error is rendered by Echo's error handler inside
// the middleware: the page is stored and replayed. Requests that reach no
// route of their own (here a not-found route) pass through untouched.
func ExampleMiddleware() {
	store := memstore.New()
	defer store.Close()
	engine, err := idem.New(store)
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.Use(middleware.Recover(), idemechov5.Middleware(engine))
	e.POST("/carts/:id/checkout", func(c *echo.Context) error {
		return echo.NewHTTPError(http.StatusConflict, "cart "+c.Param("id")+" is empty")
	})
	e.RouteNotFound("/*", func(c *echo.Context) error { return c.String(http.StatusNotFound, "no such page") })

	for _, target := range []string{"/carts/7/checkout", "/carts/7/checkout", "/nowhere"} {
		r := httptest.NewRequest(http.MethodPost, target, nil)
		r.Header.Set("Idempotency-Key", "checkout-1")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		fmt.Printf("%d %s replayed=%q\n", w.Code, strings.TrimSpace(w.Body.String()), w.Header().Get("Idempotent-Replayed"))
	}
	// Output:
	// 409 {"message":"cart 7 is empty"} replayed=""
	// 409 {"message":"cart 7 is empty"} replayed="true"
	// 404 no such page replayed=""
}
