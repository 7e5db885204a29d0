package idemgin_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idem/adapters/gin"
	idem "github.com/idemkit/idem/core"
)

func TestCheckRoutes(t *testing.T) {
	r := gin.New()
	api := r.Group("/api")
	api.POST("/orders", func(*gin.Context) {})
	api.PATCH("/orders/:id", func(*gin.Context) {})
	if err := idemgin.CheckRoutes(r, idem.ForRoute("POST", "/api/orders", idem.Optional()), idem.ForRoute("PATCH", "/api/orders/:id", idem.Skip())); err != nil {
		t.Errorf("routes the router has: %v", err)
	}
	err := idemgin.CheckRoutes(r, idem.ForRoute("POST", "/api/orders/{id}", idem.Skip()))
	if !errors.Is(err, idem.ErrBadOption) || !strings.Contains(err.Error(), "POST /api/orders/{id}") {
		t.Errorf("chi syntax on gin: %v, want ErrBadOption naming the rule", err)
	}
}
