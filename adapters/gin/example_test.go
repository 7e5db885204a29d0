package idemgin_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idem/adapters/gin"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

func Example() {
	gin.SetMode(gin.ReleaseMode)
	store := memstore.New()
	defer store.Close()
	engine, err := idem.New(store)
	if err != nil {
		panic(err)
	}

	orders := 0
	createOrder := func(c *gin.Context) {
		orders++
		c.JSON(http.StatusCreated, gin.H{"id": orders})
	}

	router := gin.New()
	router.Use(gin.Recovery())

	// Globally: every route of the router, with overrides by route.
	router.Use(idemgin.Middleware(engine,
		idem.ForRoute(http.MethodPost, "/search", idem.Optional()),
	))
	router.POST("/orders", createOrder)
	router.POST("/search", func(c *gin.Context) { c.String(http.StatusOK, "results") })

	// Per route or group, with the options where the route is declared
	// (on a router without the global middleware):
	api := gin.New()
	v1 := api.Group("/v1", idemgin.Middleware(engine))
	v1.POST("/orders", createOrder)
	api.POST("/quick", idemgin.Middleware(engine, idem.Optional(), idem.TTL(time.Hour)), createOrder)

	send := func(h http.Handler, path, key string) {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"item":"tea"}`))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		body := w.Body.String()
		if w.Code == http.StatusBadRequest {
			body = w.Header().Get("Content-Type")
		}
		if w.Header().Get("Idempotent-Replayed") == "true" {
			body += " (replayed)"
		}
		fmt.Println(path, w.Code, body)
	}
	send(router, "/orders", "order-1")
	send(router, "/orders", "order-1") // the retry is replayed
	send(router, "/orders", "")        // no key: 400
	send(router, "/search", "")        // optional key
	send(api, "/v1/orders", "order-1") // another router, another route: runs
	send(api, "/v1/orders", "order-1")
	fmt.Println("orders created:", orders)
	// Output:
	// /orders 201 {"id":1}
	// /orders 201 {"id":1} (replayed)
	// /orders 400 application/problem+json
	// /search 200 results
	// /v1/orders 201 {"id":2}
	// /v1/orders 201 {"id":2} (replayed)
	// orders created: 2
}
