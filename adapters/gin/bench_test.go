package idemgin_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idem/adapters/gin"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

// The benchmarks serve POST /orders/:id with 1 KiB of JSON in and out, on
// memstore: "first" with a new key per request (the handler runs and the
// response is stored), "replay" with one key (the stored response is
// replayed), "bare" without the middleware. BenchmarkGin runs it through
// Gin with this package's middleware, and, as "core-first" and
// "core-replay", with the core's own net/http middleware wrapped as the
// route's handler (gin.WrapH), so the difference is the adapter's own
// cost. BenchmarkNetHTTP runs the same handler on a ServeMux with the
// core's middleware.

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

// orders is the route's handler, in net/http form so that every variant
// runs the same code.
func orders(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if len(body) != len(benchIn) {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(benchOut)
}

func ginOrders(chain ...gin.HandlerFunc) http.Handler {
	r := gin.New()
	r.POST("/orders/:id", chain...)
	return r
}

func muxOrders(mw func(http.Handler) http.Handler) http.Handler {
	var h http.Handler = http.HandlerFunc(orders)
	if mw != nil {
		h = mw(h)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", h)
	return mux
}

// sink is a reusable ResponseWriter that keeps only the status.
type sink struct {
	h    http.Header
	code int
}

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) WriteHeader(code int)        { s.code = code }
func (s *sink) Write(p []byte) (int, error) { return len(p), nil }

func runBench(b *testing.B, h http.Handler, newKey bool) {
	r, err := http.NewRequest(http.MethodPost, "http://x/orders/42", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	body := &bodyReader{}
	w := &sink{h: http.Header{}}
	key := []string{"bench-key"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if newKey {
			key[0] = "k" + strconv.Itoa(i)
		}
		r.Header["Idempotency-Key"] = key
		body.Reset(benchIn)
		r.Body, r.ContentLength = body, int64(len(benchIn))
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, r)
		if w.code != 201 {
			b.Fatalf("status %d", w.code)
		}
	}
}

type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

func BenchmarkGin(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	h := gin.WrapF(orders)
	adapter := func(b *testing.B) http.Handler { return ginOrders(idemgin.Middleware(benchEngine(b)), h) }
	core := func(b *testing.B) http.Handler {
		route := idem.RouteFunc(func(*http.Request) string { return "/orders/:id" })
		return ginOrders(gin.WrapH(benchEngine(b).Middleware(route)(http.HandlerFunc(orders))))
	}
	b.Run("bare", func(b *testing.B) { runBench(b, ginOrders(h), true) })
	b.Run("first", func(b *testing.B) { runBench(b, adapter(b), true) })
	b.Run("replay", func(b *testing.B) { runBench(b, adapter(b), false) })
	b.Run("core-first", func(b *testing.B) { runBench(b, core(b), true) })
	b.Run("core-replay", func(b *testing.B) { runBench(b, core(b), false) })
}

func BenchmarkNetHTTP(b *testing.B) {
	b.Run("bare", func(b *testing.B) { runBench(b, muxOrders(nil), true) })
	b.Run("first", func(b *testing.B) { runBench(b, muxOrders(benchEngine(b).Middleware()), true) })
	b.Run("replay", func(b *testing.B) { runBench(b, muxOrders(benchEngine(b).Middleware()), false) })
}
