package memstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

// The engine's cost on its fastest store: each path next to the bare
// handler it protects (1 KiB of JSON in, 1 KiB of JSON out).

type line struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

type order struct {
	Customer string `json:"customer"`
	Lines    []line `json:"lines"`
}

// reqJSON is an order of about 1 KiB.
var reqJSON = func() []byte {
	o := order{Customer: "cus_0123456789"}
	for i := 0; i < 28; i++ {
		o.Lines = append(o.Lines, line{SKU: "sku-" + strconv.Itoa(100000+i), Quantity: i + 1})
	}
	b, _ := json.Marshal(o)
	return b
}()

// jsonHandler is a realistic handler: it decodes the order and answers
// with it, about 1 KiB of JSON each way.
func jsonHandler(w http.ResponseWriter, r *http.Request) {
	var o order
	if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.Customer = "created"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(o)
}

// discardWriter is a reusable ResponseWriter, so the benchmarks measure the
// engine rather than httptest.ResponseRecorder.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

func benchEngine(b *testing.B) http.Handler {
	s := memstore.New(memstore.WithMaxEntries(10_000_000))
	b.Cleanup(func() { s.Close() })
	e, err := idem.New(s, idem.WithObserver(idem.SlogObserver(slog.New(slog.DiscardHandler))))
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", e.Middleware()(http.HandlerFunc(jsonHandler)))
	return mux
}

func bareHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", jsonHandler)
	return mux
}

func serve(b *testing.B, h http.Handler, keyFn func(i int) string, body []byte) {
	b.Helper()
	r := httptest.NewRequest("POST", "/orders", nil)
	r.Header.Set("Content-Type", "application/json")
	w := &discardWriter{h: http.Header{}}
	rd := bytes.NewReader(body)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		rd.Reset(body)
		r.Body = io.NopCloser(rd)
		r.ContentLength = int64(len(body))
		if keyFn != nil {
			r.Header["Idempotency-Key"] = []string{keyFn(i)}
		}
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}

var keys = func() []string {
	k := make([]string, 1<<20)
	for i := range k {
		k[i] = "key-" + strconv.Itoa(i)
	}
	return k
}()

func BenchmarkBareHandler(b *testing.B) {
	serve(b, bareHandler(), nil, reqJSON)
}

func BenchmarkFirstRequest(b *testing.B) {
	h := benchEngine(b)
	serve(b, h, func(i int) string {
		if i < len(keys) {
			return keys[i]
		}
		return "key-" + strconv.Itoa(i) // past the precomputed keys: one more allocation
	}, reqJSON)
}

func BenchmarkReplay(b *testing.B) {
	h := benchEngine(b)
	serve(b, h, func(int) string { return "same" }, reqJSON)
}

func BenchmarkMismatch(b *testing.B) {
	h := benchEngine(b)
	r := httptest.NewRequest("POST", "/orders", bytes.NewReader([]byte(`{"other":1}`)))
	r.Header.Set("Idempotency-Key", "same")
	h.ServeHTTP(httptest.NewRecorder(), r)
	serve(b, h, func(int) string { return "same" }, reqJSON)
}

// doEngine is an engine for Engine.Do, the lifecycle without HTTP.
func doEngine(b *testing.B) *idem.Engine {
	s := memstore.New(memstore.WithMaxEntries(10_000_000))
	b.Cleanup(func() { s.Close() })
	e, err := idem.New(s, idem.WithObserver(idem.SlogObserver(slog.New(slog.DiscardHandler))))
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func BenchmarkDoFirst(b *testing.B) {
	e := doEngine(b)
	op := idem.Op{Kind: "bench", Name: "orders", Fingerprint: "fp"}
	fn := func(context.Context) ([]byte, error) { return reqJSON, nil }
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		op.Key = keys[i%len(keys)]
		if _, _, err := e.Do(b.Context(), op, fn); err != nil && i < len(keys) {
			b.Fatal(err)
		}
	}
}

func BenchmarkDoReplay(b *testing.B) {
	e := doEngine(b)
	op := idem.Op{Kind: "bench", Name: "orders", Key: "same", Fingerprint: "fp"}
	fn := func(context.Context) ([]byte, error) { return reqJSON, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := e.Do(b.Context(), op, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncryption compares the first request and the replay with
// WithEncryption (sealed) to the same without it (plain), at 1 KiB and 64
// KiB responses: benchstat the sealed rows against the plain ones.
func BenchmarkEncryption(b *testing.B) {
	keys := []idem.EncryptionKey{{ID: "k1", Secret: bytes.Repeat([]byte{1}, 32)}}
	for _, size := range []int{1 << 10, 64 << 10} {
		payload := bytes.Repeat([]byte("x"), size)
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/octet-stream")
			w.WriteHeader(http.StatusCreated)
			w.Write(payload)
		})
		for _, mode := range []string{"plain", "sealed"} {
			opts := []idem.Option{idem.WithObserver(func(context.Context, idem.Event) {})}
			if mode == "sealed" {
				opts = append(opts, idem.WithEncryption(keys...))
			}
			build := func(b *testing.B) http.Handler {
				s := memstore.New(memstore.WithMaxEntries(10_000_000), memstore.WithMaxBytes(8<<30))
				b.Cleanup(func() { s.Close() })
				e, err := idem.New(s, opts...)
				if err != nil {
					b.Fatal(err)
				}
				mux := http.NewServeMux()
				mux.Handle("POST /orders", e.Middleware(idem.WithMaxResponseBody(128<<10))(handler))
				return mux
			}
			name := mode + "/" + strconv.Itoa(size>>10) + "KiB"
			b.Run("first/"+name, func(b *testing.B) {
				serve(b, build(b), func(i int) string { return keys1M(i) }, reqJSON)
			})
			b.Run("replay/"+name, func(b *testing.B) {
				serve(b, build(b), func(int) string { return "same" }, reqJSON)
			})
		}
	}
}

// keys1M returns a distinct key for i.
func keys1M(i int) string {
	if i < len(keys) {
		return keys[i]
	}
	return "key-" + strconv.Itoa(i)
}
