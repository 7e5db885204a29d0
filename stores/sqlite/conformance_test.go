package sqlitestore

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// TestConformance runs the shared store suite, each subtest on its own
// database file.
func TestConformance(t *testing.T) {
	conformance.RunStore(t, func(t *testing.T) store.Store { return newStore(t, nil) })
}

// TestConformanceExactlyOnce runs it against the exactly-once view, which
// must keep the same contract.
func TestConformanceExactlyOnce(t *testing.T) {
	conformance.RunStore(t, func(t *testing.T) store.Store { return newStore(t, nil).ExactlyOnce() })
}

// TestHTTP runs the HTTP behaviour suite through the core's net/http
// middleware, in both modes: the fixture's handlers never touch the
// transaction, which exactly-once mode must allow.
func TestHTTP(t *testing.T) {
	for name, wrap := range map[string]func(*Store) store.Store{
		"plain":        func(s *Store) store.Store { return s },
		"exactly once": func(s *Store) store.Store { return s.ExactlyOnce() },
	} {
		t.Run(name, func(t *testing.T) {
			conformance.RunHTTP(t, conformance.Harness{
				NewStore: func(t *testing.T) store.Store { return wrap(newStore(t, nil)) },
				Handler: func(t *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
					return f.ServeMux(e.Middleware)
				},
			})
		})
	}
}
