package pgxstore

import (
	"context"
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

// TestConformanceTxEnded runs the shared check of a Commit after the
// handler's transaction ended, for each way a handler ends or breaks it:
// Rollback on the transaction Tx returns, a COMMIT or ROLLBACK statement,
// and a statement that fails (PostgreSQL then refuses everything until
// ROLLBACK).
func TestConformanceTxEnded(t *testing.T) {
	p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	for name, end := range map[string]func(t *testing.T, ctx context.Context){
		"Rollback":           func(t *testing.T, ctx context.Context) { txExec(t, ctx, "") },
		"COMMIT statement":   func(t *testing.T, ctx context.Context) { txExec(t, ctx, "COMMIT") },
		"ROLLBACK statement": func(t *testing.T, ctx context.Context) { txExec(t, ctx, "ROLLBACK") },
		"failed statement": func(t *testing.T, ctx context.Context) {
			tx, _ := Tx(ctx)
			if _, err := tx.Exec(ctx, "SELECT 1/0"); err == nil {
				t.Fatal("division by zero succeeded")
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			conformance.RunTxEnded(t, func(t *testing.T) store.Store { return newStore(t, p).ExactlyOnce() }, end)
		})
	}
}

// txExec runs stmt on the transaction ctx carries, or rolls it back with
// its Rollback method when stmt is empty.
func txExec(t *testing.T, ctx context.Context, stmt string) {
	t.Helper()
	tx, ok := Tx(ctx)
	if !ok {
		t.Fatal("no transaction in the context")
	}
	var err error
	if stmt == "" {
		err = tx.Rollback(ctx)
	} else {
		_, err = tx.Exec(ctx, stmt)
	}
	if err != nil {
		t.Fatal(err)
	}
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
