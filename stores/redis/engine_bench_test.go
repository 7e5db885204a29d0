package redisstore

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	idem "github.com/idemkit/idem/core"
)

// BenchmarkEngineHTTP is the engine's net/http middleware on Redis, end
// to end in the process: a first request (claim, complete) and a replay,
// 1 KiB each way, for comparisons between commits with benchstat.
func BenchmarkEngineHTTP(b *testing.B) {
	client := testClient(b)
	body := bytes.Repeat([]byte("x"), 1<<10)
	for _, name := range []string{"first", "replay"} {
		b.Run(name, func(b *testing.B) {
			s := newTestStore(b, client)
			e, err := idem.New(s, idem.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				b.Fatal(err)
			}
			h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/octet-stream")
				w.WriteHeader(http.StatusCreated)
				w.Write(body)
			}))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				key := "same"
				if name == "first" {
					key = "k" + strconv.Itoa(i)
				}
				r := httptest.NewRequest("POST", "/orders", bytes.NewReader(body))
				r.Header.Set("Idempotency-Key", key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusCreated {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}
