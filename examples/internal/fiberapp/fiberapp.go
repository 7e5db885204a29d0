// Package fiberapp serves the examples' Fiber apps: natively on fasthttp,
// through app.ServeWith, with the examples' net/http handlers run through
// Fiber's adaptor.
package fiberapp

import (
	"context"
	"net"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
)

// Server serves App on the listener app.ServeWith gives it.
type Server struct{ App *fiber.App }

// Serve serves the app on ln until Shutdown.
func (s Server) Serve(ln net.Listener) error {
	return s.App.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
}

// Shutdown stops the app, waiting for its requests up to ctx's end.
func (s Server) Shutdown(ctx context.Context) error { return s.App.ShutdownWithContext(ctx) }

// Handler runs h, a net/http handler of the examples, as a Fiber route's
// handler: its request carries the Fiber request's context (c.Context,
// where the idempotency middleware puts an exactly-once transaction), and
// param returns the route's parameters.
func Handler(h func(w http.ResponseWriter, r *http.Request, param func(string) string)) fiber.Handler {
	return func(c fiber.Ctx) error {
		params := make(map[string]string, len(c.Route().Params))
		for _, n := range c.Route().Params {
			params[n] = strings.Clone(c.Params(n)) // Fiber reuses its buffers
		}
		return adaptor.HTTPHandlerWithContext(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ctx, ok := adaptor.LocalContextFromHTTPRequest(r); ok {
				r = r.WithContext(ctx)
			}
			h(w, r, func(name string) string { return params[name] })
		}))(c)
	}
}
