package pgxstore

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestConformance runs the shared store suite against PostgreSQL, each
// subtest in its own table on one pool.
func TestConformance(t *testing.T) {
	p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	conformance.RunStore(t, func(t *testing.T) store.Store { return newStore(t, p) })
}

// TestConformanceExactlyOnce runs it against the exactly-once view, which
// must keep the same contract.
func TestConformanceExactlyOnce(t *testing.T) {
	p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	conformance.RunStore(t, func(t *testing.T) store.Store { return newStore(t, p).ExactlyOnce() })
}

// TestHTTP runs the HTTP behaviour suite through the core's net/http
// middleware on PostgreSQL, in both modes: the fixture's handlers never
// touch the transaction, which exactly-once mode must allow.
func TestHTTP(t *testing.T) {
	p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 32 })
	for name, wrap := range map[string]func(*Store) store.Store{
		"plain":        func(s *Store) store.Store { return s },
		"exactly once": func(s *Store) store.Store { return s.ExactlyOnce() },
	} {
		t.Run(name, func(t *testing.T) {
			conformance.RunHTTP(t, conformance.Harness{
				NewStore: func(t *testing.T) store.Store { return wrap(newStore(t, p)) },
				Handler: func(t *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
					return f.ServeMux(e.Middleware)
				},
			})
		})
	}
}
