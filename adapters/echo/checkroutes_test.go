package idemecho_test

import (
	"errors"
	"strings"
	"testing"

	idemecho "github.com/idemkit/idem/adapters/echo"
	idem "github.com/idemkit/idem/core"
	"github.com/labstack/echo/v4"
)

func TestCheckRoutes(t *testing.T) {
	e := echo.New()
	api := e.Group("/api")
	api.POST("/orders", func(echo.Context) error { return nil })
	api.PATCH("/orders/:id", func(echo.Context) error { return nil })
	if err := idemecho.CheckRoutes(e, idem.ForRoute("POST", "/api/orders", idem.Optional()), idem.ForRoute("PATCH", "/api/orders/:id", idem.Skip())); err != nil {
		t.Errorf("routes the router has: %v", err)
	}
	err := idemecho.CheckRoutes(e, idem.ForRoute("POST", "/orders", idem.Skip()))
	if !errors.Is(err, idem.ErrBadOption) || !strings.Contains(err.Error(), "POST /orders") {
		t.Errorf("a route outside its group: %v, want ErrBadOption naming the rule", err)
	}
}
