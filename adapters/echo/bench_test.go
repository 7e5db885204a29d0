package idemecho_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"testing"

	idemecho "github.com/idemkit/idem/adapters/echo"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
	"github.com/labstack/echo/v4"
)

// The benchmarks send one POST with 1 KiB of JSON to a handler that sends
// it back, without the middleware (bare), with a new key each time (first),
// with the same key (replay) and through a policy that skips the route
// (skipped), through Echo and, for comparison, through the core's net/http
// middleware on a ServeMux. The adapter's cost is (echo/first - echo/bare)
// - (nethttp/first - nethttp/bare), and the same for the other cases.

// payload is a 1 KiB JSON document.
var payload = func() []byte {
	p := []byte(`{"note":"`)
	p = append(p, bytes.Repeat([]byte("x"), 1024-len(p)-2)...)
	return append(p, `"}`...)
}()

func benchEngine(b *testing.B) *idem.Engine {
	s := memstore.New(memstore.WithMaxEntries(1 << 14))
	b.Cleanup(func() { s.Close() })
	eng, err := idem.New(s, idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

// sink is a ResponseWriter that keeps nothing, reused across iterations.
type sink struct {
	h    http.Header
	code int
}

func (s *sink) Header() http.Header         { return s.h }
func (s *sink) WriteHeader(code int)        { s.code = code }
func (s *sink) Write(p []byte) (int, error) { return len(p), nil }

// body is a reusable request body.
type body struct{ bytes.Reader }

func (*body) Close() error { return nil }

// run serves one request per iteration; newKey picks a fresh key each time.
func run(b *testing.B, h http.Handler, key string, newKey bool, wantCode int) {
	r, _ := http.NewRequest(http.MethodPost, "/orders", nil)
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	var rb body
	w := &sink{h: make(http.Header)}
	i := 0
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		rb.Reset(payload)
		r.Body, r.ContentLength = &rb, int64(len(payload))
		if newKey {
			i++
			r.Header["Idempotency-Key"] = []string{key + strconv.Itoa(i)}
		}
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, r)
		if w.code != wantCode {
			b.Fatalf("status %d, want %d", w.code, wantCode)
		}
	}
}

func benchCases(b *testing.B, h func(opts ...idem.HTTPOption) http.Handler) {
	b.Run("bare", func(b *testing.B) { run(b, h(), "", false, 201) })
	b.Run("first", func(b *testing.B) { run(b, h(idem.Required()), "k", true, 201) })
	b.Run("replay", func(b *testing.B) { run(b, h(idem.Required()), "same", false, 201) })
	// The middleware with a policy that lets the request through: the
	// engine does almost nothing, so the adapter's own cost shows.
	b.Run("skipped", func(b *testing.B) { run(b, h(idem.Skip()), "k", false, 201) })
}

func BenchmarkEcho(b *testing.B) {
	benchCases(b, func(opts ...idem.HTTPOption) http.Handler {
		e := echo.New()
		var mw []echo.MiddlewareFunc
		if len(opts) > 0 {
			mw = append(mw, idemecho.Middleware(benchEngine(b), opts...))
		}
		e.POST("/orders", func(c echo.Context) error {
			p, err := io.ReadAll(c.Request().Body)
			if err != nil {
				return err
			}
			return c.JSONBlob(http.StatusCreated, p)
		}, mw...)
		return e
	})
}

func BenchmarkNetHTTP(b *testing.B) {
	benchCases(b, func(opts ...idem.HTTPOption) http.Handler {
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			w.Write(p)
		})
		if len(opts) > 0 {
			h = benchEngine(b).Middleware(opts...)(h)
		}
		mux := http.NewServeMux()
		mux.Handle("POST /orders", h)
		return mux
	})
}
