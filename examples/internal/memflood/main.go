// Command memflood floods an engine on the memory store with unique keys
// and large responses, in process, and prints the process's peak RSS, for
// the end-to-end memory test (examples/e2e TestMemoryFlood):
//
//	memflood -n 120000 -size 65536
//
// It prints one line: "records=R bytes=B peak_rss=P rss=S" (bytes in
// bytes).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"

	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

func main() {
	n := flag.Int("n", 120_000, "requests, each with a new key")
	size := flag.Int("size", 64<<10, "response body size in bytes")
	flag.Parse()

	store := memstore.New()
	defer store.Close()
	engine, err := idem.New(store, idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	body := []byte(strings.Repeat("x", *size))
	h := engine.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(body)
	}))
	for i := range *n {
		r := httptest.NewRequest(http.MethodPost, "/flood", nil)
		r.Header.Set("Idempotency-Key", "k"+strconv.Itoa(i))
		w := discard{h: http.Header{}}
		h.ServeHTTP(&w, r)
		if w.code != http.StatusOK {
			fmt.Fprintf(os.Stderr, "request %d: status %d\n", i, w.code)
			os.Exit(1)
		}
	}
	fmt.Printf("records=%d bytes=%d peak_rss=%d rss=%d\n", store.Len(), store.Bytes(), status("VmHWM"), status("VmRSS"))
}

// discard is a ResponseWriter that keeps only the status.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header { return d.h }

func (d *discard) WriteHeader(code int) {
	if d.code == 0 {
		d.code = code
	}
}

func (d *discard) Write(p []byte) (int, error) {
	if d.code == 0 {
		d.code = http.StatusOK
	}
	return len(p), nil
}

// status returns a /proc/self/status field in bytes, or -1.
func status(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}
