package idemfiber_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gofiber/fiber/v3"
	fiberrecover "github.com/gofiber/fiber/v3/middleware/recover"
	idemfiber "github.com/idemkit/idem/adapters/fiber"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

func Example() {
	store := memstore.New()
	defer store.Close()
	engine, err := idem.New(store)
	if err != nil {
		panic(err)
	}

	orders := 0
	createOrder := func(c fiber.Ctx) error {
		orders++
		return c.Status(fiber.StatusCreated).JSON(fiber.Map{"id": orders})
	}

	app := fiber.New()
	app.Use(fiberrecover.New())
	// On the routes: one middleware for many routes, with overrides by
	// route template, or one per route with its options.
	mw := idemfiber.Middleware(engine, idem.ForRoute(http.MethodPost, "/v1/search", idem.Optional()))
	v1 := app.Group("/v1")
	v1.Post("/orders", mw, createOrder)
	v1.Post("/search", mw, func(c fiber.Ctx) error { return c.SendString("results") })
	app.Post("/quick", idemfiber.Middleware(engine, idem.TTL(time.Hour)), createOrder)

	if err := idemfiber.CheckRoutes(app, idem.ForRoute(http.MethodPost, "/v1/search", idem.Optional())); err != nil {
		panic(err)
	}

	send := func(path, key string) {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"item":"tea"}`))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		resp, err := app.Test(r)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		body := string(b)
		if resp.StatusCode == http.StatusBadRequest {
			body = resp.Header.Get("Content-Type")
		}
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			body += " (replayed)"
		}
		fmt.Println(path, resp.StatusCode, body)
	}
	send("/v1/orders", "order-1")
	send("/v1/orders", "order-1") // the retry is replayed
	send("/v1/orders", "")        // no key: 400
	send("/v1/search", "")        // optional key
	send("/quick", "order-1")     // another route: another key
	send("/quick", "order-1")
	fmt.Println("orders created:", orders)
	// Output:
	// /v1/orders 201 {"id":1}
	// /v1/orders 201 {"id":1} (replayed)
	// /v1/orders 400 application/problem+json
	// /v1/search 200 results
	// /quick 201 {"id":2}
	// /quick 201 {"id":2} (replayed)
	// orders created: 2
}

// Config scopes keys by the client: here a tenant that authentication
// middleware, mounted before, put in c.Locals.
func ExampleConfig() {
	store := memstore.New()
	defer store.Close()
	engine, err := idem.New(store)
	if err != nil {
		panic(err)
	}
	mw := idemfiber.Config{
		Namespace: func(c fiber.Ctx) string { return fiber.Locals[string](c, "tenant") },
	}.Middleware(engine)

	app := fiber.New()
	app.Use(func(c fiber.Ctx) error { // stands for real authentication
		fiber.Locals(c, "tenant", c.Get("X-Tenant"))
		return c.Next()
	})
	app.Post("/orders", mw, func(c fiber.Ctx) error {
		return c.Status(fiber.StatusCreated).SendString("created for " + c.Get("X-Tenant"))
	})

	for _, tenant := range []string{"alice", "bob", "alice"} {
		r := httptest.NewRequest(http.MethodPost, "/orders", nil)
		r.Header.Set("Idempotency-Key", "k1")
		r.Header.Set("X-Tenant", tenant)
		resp, err := app.Test(r)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			b = append(b, " (replayed)"...)
		}
		fmt.Println(tenant, resp.StatusCode, string(b))
	}
	// Output:
	// alice 201 created for alice
	// bob 201 created for bob
	// alice 201 created for alice (replayed)
}

// An option that needs a *http.Request is refused.
func ExampleMiddleware_refused() {
	store := memstore.New()
	defer store.Close()
	engine, err := idem.New(store)
	if err != nil {
		panic(err)
	}
	defer func() { fmt.Println(recover()) }()
	idemfiber.Middleware(engine, idem.WithNamespace(func(r *http.Request) string { return r.Header.Get("X-Tenant") }))
	// Output:
	// idemfiber: idem: bad option: Fiber has no *http.Request for WithNamespace; leave them out and set idemfiber.Config's Namespace or Fingerprint instead (WithKeyField has no Fiber equivalent: send the key in the Idempotency-Key header; nor has RouteFunc: the route is c.Route().Path)
}
