package pgxstore

import (
	"testing"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestConformance runs the shared store suite against PostgreSQL, each
// subtest in its own table on one pool.
func TestConformance(t *testing.T) {
	p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	conformance.RunStore(t, func(t *testing.T) idem.Store { return newStore(t, p) })
}

// TestConformanceExactlyOnce runs it against the exactly-once view, which
// must keep the same contract.
func TestConformanceExactlyOnce(t *testing.T) {
	p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
	conformance.RunStore(t, func(t *testing.T) idem.Store { return newStore(t, p).ExactlyOnce() })
}
