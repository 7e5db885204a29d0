package dynamostore

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
)

// TestConformance runs the shared store suite against DynamoDB (dynalite
// in CI), each subtest under its own key prefix in one table.
func TestConformance(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client)
	conformance.RunStore(t, func(t *testing.T) idem.Store { return newStore(t, client, table...) })
}

// TestConformanceSingleTable runs it on a single-table layout: other key
// names, a sort key holding a prefix and the record id, and renamed
// attributes.
func TestConformanceSingleTable(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client, WithPartitionKey("PK"), WithSortKeyPrefix("SK", "IDEM#"),
		WithAttributes(Attributes{TTL: "expires", State: "idem_state", Body: "data"}))
	conformance.RunStore(t, func(t *testing.T) idem.Store { return newStore(t, client, table...) })
}

// TestConformanceExactlyOnce runs it against the exactly-once view, which
// must keep the same contract.
func TestConformanceExactlyOnce(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client, WithSortKey("sk", "idem"))
	conformance.RunStore(t, func(t *testing.T) idem.Store { return newStore(t, client, table...).ExactlyOnce() })
}

// TestHTTP runs the HTTP behaviour suite through the core's net/http
// middleware on DynamoDB, in both modes: the fixture's handlers never
// collect writes, which exactly-once mode must allow.
func TestHTTP(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client)
	for name, wrap := range map[string]func(*Store) idem.Store{
		"plain":        func(s *Store) idem.Store { return s },
		"exactly once": func(s *Store) idem.Store { return s.ExactlyOnce() },
	} {
		t.Run(name, func(t *testing.T) {
			conformance.RunHTTP(t, conformance.Harness{
				NewStore: func(t *testing.T) idem.Store { return wrap(newStore(t, client, table...)) },
				Handler: func(t *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
					return f.ServeMux(e.Middleware)
				},
			})
		})
	}
}
