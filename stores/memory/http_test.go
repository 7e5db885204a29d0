package memstore_test

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	memstore "github.com/idemkit/idem/stores/memory"
)

func newStore(t *testing.T) store.Store {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	return s
}

// TestHTTP runs the HTTP behaviour suite through the core's net/http
// middleware on a ServeMux, mounted per route and once around the mux.
func TestHTTP(t *testing.T) {
	t.Run("per route", func(t *testing.T) {
		conformance.RunHTTP(t, conformance.Harness{
			NewStore: newStore,
			Handler: func(t *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
				return f.ServeMux(e.Middleware)
			},
		})
	})
	t.Run("around the mux", func(t *testing.T) {
		conformance.RunHTTP(t, conformance.Harness{
			NewStore: newStore,
			Handler: func(t *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
				mux := http.NewServeMux()
				for _, rt := range f.Routes() {
					mux.HandleFunc(rt.Method+" "+rt.Path, func(w http.ResponseWriter, r *http.Request) {
						rt.Handler(w, r, r.PathValue)
					})
				}
				return conformance.Recoverer(e.Middleware(f.GlobalOptions()...)(mux))
			},
		})
	})
}
