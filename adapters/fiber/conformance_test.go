package idemfiber_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	fiberrecover "github.com/gofiber/fiber/v3/middleware/recover"
	idemfiber "github.com/idemkit/idem/adapters/fiber"
	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

// fixtureApp mounts the conformance fixture on a Fiber app: the
// middleware on each protected route with its options, Fiber's recover
// middleware outermost, keys scoped by the fixture's namespace through
// Config.Namespace. The fixture's handlers are net/http, run through
// Fiber's adaptor; the middleware is native.
//
// fasthttp refuses a request whose header holds a control character (one
// of the suite's invalid keys) while parsing it, before any handler runs,
// as net/http's server does; Fiber's error handler answers it. The app
// renders its errors as RFC 9457 problems (problemErrors), as an API
// would, so that clients see a problem there too.
func fixtureApp(e *idem.Engine, f *conformance.Fixture) *fiber.App {
	app := fiber.New(fiber.Config{ErrorHandler: problemErrors})
	app.Use(fiberrecover.New())
	cfg := idemfiber.Config{Namespace: func(c fiber.Ctx) string { return conformance.BearerName(c.Get("Authorization")) }}
	for _, rt := range f.Routes() {
		handler := func(c fiber.Ctx) error {
			params := map[string]string{}
			for _, n := range c.Route().Params {
				params[n] = string([]byte(c.Params(n)))
			}
			return adaptor.HTTPHandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rt.Handler(w, r, func(name string) string { return params[name] })
			})(c)
		}
		if rt.Protected {
			app.Add([]string{rt.Method}, rt.ColonPath(), cfg.Middleware(e, rt.Options...), handler)
		} else {
			app.Add([]string{rt.Method}, rt.ColonPath(), handler)
		}
	}
	return app
}

func fiberHarness(newStore func(t *testing.T) idem.Store) conformance.Harness {
	return conformance.Harness{
		NewStore:     newStore,
		OwnNamespace: true,
		Handler: func(t *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
			return forward(listen(t, fixtureApp(e, f)))
		},
	}
}

func TestConformanceMemory(t *testing.T) {
	conformance.RunHTTP(t, fiberHarness(func(t *testing.T) idem.Store {
		s := memstore.New()
		t.Cleanup(func() { s.Close() })
		return s
	}))
}

// problemErrors is a Fiber error handler that answers an error as an RFC
// 9457 problem.
func problemErrors(c fiber.Ctx, err error) error {
	code := fiber.StatusInternalServerError
	var fe *fiber.Error
	if errors.As(err, &fe) {
		code = fe.Code
	}
	c.Set("Cache-Control", "no-store")
	c.Set("Content-Type", "application/problem+json")
	return c.Status(code).JSON(fiber.Map{"type": "about:blank", "title": http.StatusText(code), "status": code, "detail": err.Error()}, "application/problem+json")
}
