package memstore_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
)

// lateHeaderHandler answers 201 and keeps its header map; after the
// response was sent, changes reaches the map from another goroutine
// whenever the test sends on it, as a handler that hands w.Header() to
// background work would.
func lateHeaderHandler(changes <-chan func(http.Header)) (http.Handler, *sync.WaitGroup) {
	var wg sync.WaitGroup
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-First", "1")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "made")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for change := range changes {
				change(h)
			}
		}()
	}), &wg
}

func newSnapshotEngine(t *testing.T) *idem.Engine {
	t.Helper()
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	e, err := idem.New(s, idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func post(h http.Handler) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/orders", strings.NewReader("x"))
	r.Header.Set("Idempotency-Key", "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestStoredHeadersAreASnapshot: a handler that changes the header map it
// kept after its response was sent changes neither the stored record nor
// any replay: replays carry what the first client saw.
func TestStoredHeadersAreASnapshot(t *testing.T) {
	changes := make(chan func(http.Header))
	handler, wg := lateHeaderHandler(changes)
	h := newSnapshotEngine(t).Middleware()(handler)
	first := post(h)
	if first.Code != 201 || first.Header().Get("X-Late") != "" {
		t.Fatalf("first answer %d with X-Late %q, want 201 without it", first.Code, first.Header().Get("X-Late"))
	}
	done := make(chan struct{})
	changes <- func(h http.Header) { h.Set("X-Late", "changed after the response"); h.Del("X-First"); close(done) }
	<-done
	close(changes)
	wg.Wait()
	replay := post(h)
	if replay.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("second answer is not a replay: %d %v", replay.Code, replay.Header())
	}
	if got := replay.Header().Get("X-Late"); got != "" {
		t.Errorf("replay carries X-Late: %q, a header the handler set after the first client had its answer", got)
	}
	if got := replay.Header().Get("X-First"); got != "1" {
		t.Errorf("replay's X-First = %q, want 1 as the first client saw it", got)
	}
}

// TestStoredHeadersRace replays a record while the handler that wrote it
// keeps changing its header map: under -race, a store that shares the map
// with the handler reports a data race (and without -race may crash the
// process with a concurrent map write).
func TestStoredHeadersRace(t *testing.T) {
	changes := make(chan func(http.Header))
	handler, wg := lateHeaderHandler(changes)
	h := newSnapshotEngine(t).Middleware()(handler)
	post(h)
	var replays sync.WaitGroup
	for range 4 {
		replays.Go(func() {
			for range 50 {
				if w := post(h); w.Code != 201 {
					t.Errorf("replay answered %d", w.Code)
				}
			}
		})
	}
	for i := range 200 {
		changes <- func(h http.Header) { h.Set("X-Late-"+strconv.Itoa(i%8), "v") }
	}
	close(changes)
	replays.Wait()
	wg.Wait()
}
