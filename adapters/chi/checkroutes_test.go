package idemchi_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	idemchi "github.com/idemkit/idem/adapters/chi"
	idem "github.com/idemkit/idem/core"
)

func TestCheckRoutes(t *testing.T) {
	r := chi.NewRouter()
	r.Route("/api", func(api chi.Router) {
		api.Post("/orders", func(http.ResponseWriter, *http.Request) {})
		api.Patch("/orders/{id}", func(http.ResponseWriter, *http.Request) {})
	})
	if err := idemchi.CheckRoutes(r, idem.ForRoute("POST", "/api/orders", idem.Optional()), idem.ForRoute("PATCH", "/api/orders/{id}", idem.Skip())); err != nil {
		t.Errorf("routes the router has: %v", err)
	}
	err := idemchi.CheckRoutes(r, idem.ForRoute("PATCH", "/api/orders/:id", idem.Skip()))
	if !errors.Is(err, idem.ErrBadOption) || !strings.Contains(err.Error(), "PATCH /api/orders/:id") {
		t.Errorf("gin syntax on chi: %v, want ErrBadOption naming the rule", err)
	}
}
