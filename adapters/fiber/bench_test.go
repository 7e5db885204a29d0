package idemfiber_test

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v3"
	idemfiber "github.com/idemkit/idem/adapters/fiber"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
	"github.com/valyala/fasthttp"
)

// The benchmarks serve POST /orders/:id with 1 KiB of JSON in and out, on
// memstore, in-process through the app's fasthttp handler (as
// adapters/gin's benchmarks go through gin.Engine.ServeHTTP): "first"
// with a new key per request (the handler runs and the response is
// stored), "replay" with one key (the stored response is replayed),
// "bare" without the middleware.

var (
	benchIn  = []byte(`{"note":"` + strings.Repeat("a", 1024-11) + `"}`)
	benchOut = []byte(`{"note":"` + strings.Repeat("b", 1024-11) + `"}`)
)

func benchEngine(b *testing.B) *idem.Engine {
	s := memstore.New()
	b.Cleanup(func() { s.Close() })
	e, err := idem.New(s, idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func benchOrders(c fiber.Ctx) error {
	if len(c.Body()) != len(benchIn) {
		return c.SendStatus(fiber.StatusBadRequest)
	}
	c.Set("Content-Type", "application/json")
	return c.Status(fiber.StatusCreated).Send(benchOut)
}

func fiberOrders(chain ...any) fasthttp.RequestHandler {
	app := fiber.New()
	app.Post("/orders/:id", chain[0], chain[1:]...)
	return app.Handler()
}

func runBench(b *testing.B, h fasthttp.RequestHandler, newKey bool) {
	var req fasthttp.Request
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		req.Reset()
		req.Header.SetMethod(fasthttp.MethodPost)
		req.SetRequestURI("/orders/42")
		req.Header.SetContentType("application/json")
		if newKey {
			req.Header.Set("Idempotency-Key", "k"+strconv.Itoa(i))
		} else {
			req.Header.Set("Idempotency-Key", "bench-key")
		}
		req.SetBody(benchIn)
		ctx.Init(&req, nil, nil)
		h(&ctx)
		if code := ctx.Response.StatusCode(); code != fiber.StatusCreated {
			b.Fatalf("status %d: %s", code, ctx.Response.Body())
		}
	}
}

func BenchmarkFiber(b *testing.B) {
	b.Run("bare", func(b *testing.B) { runBench(b, fiberOrders(benchOrders), true) })
	b.Run("first", func(b *testing.B) { runBench(b, fiberOrders(idemfiber.Middleware(benchEngine(b)), benchOrders), true) })
	b.Run("replay", func(b *testing.B) { runBench(b, fiberOrders(idemfiber.Middleware(benchEngine(b)), benchOrders), false) })
}
