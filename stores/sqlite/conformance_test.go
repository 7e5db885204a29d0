package sqlitestore

import (
	"context"
	"database/sql"
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

// TestTxEnded runs the shared check of Commit after the handler ended
// its transaction, committing it and rolling it back.
func TestTxEnded(t *testing.T) {
	for name, end := range map[string]func(*sql.Tx) error{"committed": (*sql.Tx).Commit, "rolled back": (*sql.Tx).Rollback} {
		t.Run(name, func(t *testing.T) {
			conformance.RunTxEnded(t, func(t *testing.T) store.Store { return newStore(t, nil).ExactlyOnce() },
				func(t *testing.T, ctx context.Context) {
					tx, ok := Tx(ctx)
					if !ok {
						t.Fatal("no transaction in the context Tx.Context returned")
					}
					if err := end(tx); err != nil {
						t.Fatal(err)
					}
				})
		})
	}
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
