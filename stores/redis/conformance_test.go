package redisstore

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

// TestConformance runs the shared store suite against the Redis server at
// IDEM_TEST_REDIS_URL, each subtest under its own key prefix.
func TestConformance(t *testing.T) {
	client := testClient(t)
	conformance.RunStore(t, func(t *testing.T) store.Store { return newTestStore(t, client) })
}

// TestConformanceScriptClaims runs the suite with every claim going
// through the claim script, which must be right on its own: the fast path
// only ever hands it the cases it cannot settle.
func TestConformanceScriptClaims(t *testing.T) {
	client := testClient(t)
	conformance.RunStore(t, func(t *testing.T) store.Store {
		s := newTestStore(t, client)
		s.scriptClaims = true
		return s
	})
}

// TestConformanceCluster runs the shared store suite against a three-node
// Redis Cluster that the test starts on loopback ports and tears down.
func TestConformanceCluster(t *testing.T) {
	client := startCluster(t)
	conformance.RunStore(t, func(t *testing.T) store.Store { return newTestStore(t, client) })
}

// TestHTTP runs the HTTP behaviour suite through the core's net/http
// middleware on Redis, on one server and on the cluster.
//
// The suite moves a manual clock (idem.WithClock) to pass leases and
// retentions. The engine aligns the time it passes to a store that is a
// store.Clock with the store's clock, measuring the offset against the
// engine's clock in the background: a measurement that straddles a move
// of the manual clock takes the move back (core/clock.go). So the suite
// runs the Store without its Clock; the store suite checks Now.
func TestHTTP(t *testing.T) {
	// Each client is made in its subtest, so that -skip 'TestHTTP/cluster'
	// starts no cluster.
	for _, name := range []string{"single", "cluster"} {
		t.Run(name, func(t *testing.T) {
			var client redis.UniversalClient
			if name == "single" {
				client = testClient(t)
			} else {
				client = startCluster(t)
			}
			conformance.RunHTTP(t, conformance.Harness{
				NewStore: func(t *testing.T) store.Store { return withoutClock(newTestStore(t, client)) },
				Handler: func(t *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
					return f.ServeMux(e.Middleware)
				},
			})
		})
	}
}

// clockless is a Store with every capability but store.Clock.
type clockless struct {
	store.Store
	store.Getter
	store.Deleter
	store.Extender
	store.BatchExtender
	store.Evicter
	store.Notifier
	store.FailoverBound
}

func withoutClock(s *Store) clockless { return clockless{s, s, s, s, s, s, s, s} }
