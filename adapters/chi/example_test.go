package idemchi_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	idemchi "github.com/idemkit/idem/adapters/chi"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

// The middleware mounted once at the top of the router, with per-route
// overrides by template, and mounted where routes are declared, with
// their options there. Either way a retry with the same key is replayed
// and the handler runs once.
func Example() {
	store := memstore.New()
	defer store.Close()
	engine, err := idem.New(store)
	if err != nil {
		log.Fatal(err)
	}

	var orders atomic.Int64
	createOrder := func(w http.ResponseWriter, r *http.Request) {
		n := orders.Add(1)
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, n)
	}
	search := func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "[]") }

	// Globally: every POST and PATCH needs a key, except where ForRoute
	// says otherwise.
	global := chi.NewRouter()
	global.Use(middleware.Recoverer)
	global.Use(idemchi.Middleware(engine,
		idem.ForRoute("POST", "/search", idem.Optional()),
	))
	global.Post("/orders", createOrder)
	global.Post("/search", search)

	// Per route and per group.
	perRoute := chi.NewRouter()
	perRoute.Use(middleware.Recoverer)
	perRoute.With(idemchi.Middleware(engine, idem.Optional())).Post("/search", search)
	perRoute.Route("/api", func(r chi.Router) {
		r.Group(func(r chi.Router) {
			r.Use(idemchi.Middleware(engine, idem.TTL(time.Hour)))
			r.Post("/orders", createOrder)
		})
	})

	send := func(h http.Handler, target, key string) {
		req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(`{"item":"tea"}`))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		body := w.Body.String()
		if ct := w.Header().Get("Content-Type"); ct == "application/problem+json" {
			body = ct
		}
		fmt.Printf("%s key=%q: %d replayed=%q %s\n", target, key, w.Code, w.Header().Get("Idempotent-Replayed"), body)
	}
	send(global, "/orders", "k1")
	send(global, "/orders", "k1") // the retry: replayed
	send(global, "/orders", "")   // no key: 400 problem
	send(global, "/search", "")   // optional there
	send(perRoute, "/api/orders", "k2")
	send(perRoute, "/api/orders", "k2")
	send(perRoute, "/search", "")
	fmt.Println("orders created:", orders.Load())
	// Output:
	// /orders key="k1": 201 replayed="" {"id":1}
	// /orders key="k1": 201 replayed="true" {"id":1}
	// /orders key="": 400 replayed="" application/problem+json
	// /search key="": 200 replayed="" []
	// /api/orders key="k2": 201 replayed="" {"id":2}
	// /api/orders key="k2": 201 replayed="true" {"id":2}
	// /search key="": 200 replayed="" []
	// orders created: 2
}
