package idemechov5_test

import (
	"errors"
	"strings"
	"testing"

	idemechov5 "github.com/idemkit/idem/adapters/echov5"
	idem "github.com/idemkit/idem/core"
	"github.com/labstack/echo/v5"
)

func TestCheckRoutes(t *testing.T) {
	e := echo.New()
	api := e.Group("/api")
	api.POST("/orders", func(*echo.Context) error { return nil })
	api.PATCH("/orders/:id", func(*echo.Context) error { return nil })
	if err := idemechov5.CheckRoutes(e, idem.ForRoute("POST", "/api/orders", idem.Optional()), idem.ForRoute("PATCH", "/api/orders/:id", idem.Skip())); err != nil {
		t.Errorf("routes the router has: %v", err)
	}
	err := idemechov5.CheckRoutes(e, idem.ForRoute("PUT", "/api/orders/:id", idem.Skip()))
	if !errors.Is(err, idem.ErrBadOption) || !strings.Contains(err.Error(), "PUT /api/orders/:id") {
		t.Errorf("a method the route lacks: %v, want ErrBadOption naming the rule", err)
	}
}
