package idemchi_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	idemchi "github.com/idemkit/idem/adapters/chi"
	idem "github.com/idemkit/idem/core"
)

// The benchmarks serve POST /orders/{id} with 1 KiB of JSON in and out on
// the memory store: through chi without the middleware, with it mounted
// globally and per route, and, for comparison, through a ServeMux bare
// and behind the core's own net/http middleware. "first" sends a new key
// each time (claim, run, store); "replay" sends the same key (claim finds
// the record, replay). The adapter's cost is chi's delta over bare chi
// minus the ServeMux's delta over the bare ServeMux.

var (
	benchIn  = jsonOf(1024, "note")
	benchOut = jsonOf(1024, "receipt")
)

// jsonOf returns a JSON object of exactly n bytes.
func jsonOf(n int, field string) []byte {
	head := `{"id":42,"` + field + `":"`
	return []byte(head + strings.Repeat("x", n-len(head)-2) + `"}`)
}

func benchHandler(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write(benchOut)
}

// discardWriter is a ResponseWriter that keeps only the status and the
// headers, so the harness costs next to nothing.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

type body struct{ bytes.Reader }

func (*body) Close() error { return nil }

func benchEngine(b *testing.B) *idem.Engine {
	e, err := idem.New(newStore(b), idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// run serves b.N requests; same sends one key throughout, else a new key
// per request.
func run(b *testing.B, h http.Handler, same bool) {
	keys := make([]string, b.N+1)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
		if same {
			keys[i] = "key-same"
		}
	}
	req := httptest.NewRequest(http.MethodPost, "/orders/42", nil)
	req.Header.Set("Content-Type", "application/json")
	in := &body{}
	w := &discardWriter{h: http.Header{}}
	serve := func(i int) {
		in.Reset(benchIn)
		req.Body, req.ContentLength = in, int64(len(benchIn))
		req.Header["Idempotency-Key"] = keys[i : i+1]
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, req)
	}
	serve(b.N) // warm up; with one key, the record to replay
	if w.code != http.StatusCreated {
		b.Fatalf("status %d, want 201", w.code)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		serve(i)
	}
	b.StopTimer()
	if w.code != http.StatusCreated || (same && w.h.Get("Idempotent-Replayed") != "true") {
		b.Fatalf("status %d, headers %v", w.code, w.h)
	}
}

func BenchmarkChi(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		r := chi.NewRouter()
		r.Post("/orders/{id}", benchHandler)
		run(b, r, false)
	})
	for _, mode := range []string{"first", "replay"} {
		b.Run("global/"+mode, func(b *testing.B) {
			r := chi.NewRouter()
			r.Use(idemchi.Middleware(benchEngine(b)))
			r.Post("/orders/{id}", benchHandler)
			run(b, r, mode == "replay")
		})
		b.Run("route/"+mode, func(b *testing.B) {
			r := chi.NewRouter()
			r.With(idemchi.Middleware(benchEngine(b))).Post("/orders/{id}", benchHandler)
			run(b, r, mode == "replay")
		})
	}
}

func BenchmarkServeMux(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /orders/{id}", benchHandler)
		run(b, mux, false)
	})
	for _, mode := range []string{"first", "replay"} {
		b.Run("core/"+mode, func(b *testing.B) {
			mux := http.NewServeMux()
			mux.Handle("POST /orders/{id}", benchEngine(b).Middleware()(http.HandlerFunc(benchHandler)))
			run(b, mux, mode == "replay")
		})
	}
}
