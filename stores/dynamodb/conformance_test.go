package dynamostore

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// TestConformance runs the shared store suite against DynamoDB (dynalite
// in CI), each subtest under its own key prefix in one table.
func TestConformance(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client)
	conformance.RunStore(t, func(t *testing.T) store.Store { return newStore(t, client, table...) })
}

// TestConformanceSingleTable runs it on a single-table layout: other key
// names, a sort key holding a prefix and the record id, and renamed
// attributes.
func TestConformanceSingleTable(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client, WithPartitionKey("PK"), WithSortKeyPrefix("SK", "IDEM#"),
		WithAttributes(Attributes{TTL: "expires", State: "idem_state", Body: "data"}))
	conformance.RunStore(t, func(t *testing.T) store.Store { return newStore(t, client, table...) })
}

// TestConformanceExactlyOnce runs it against the exactly-once view, which
// must keep the same contract.
func TestConformanceExactlyOnce(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client, WithSortKey("sk", "idem"))
	conformance.RunStore(t, func(t *testing.T) store.Store { return newStore(t, client, table...).ExactlyOnce() })
}

// TestHTTP runs the HTTP behaviour suite through the core's net/http
// middleware on DynamoDB, in both modes: the fixture's handlers never
// collect writes, which exactly-once mode must allow.
func TestHTTP(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client)
	for name, wrap := range map[string]func(*Store) store.Store{
		"plain":        func(s *Store) store.Store { return s },
		"exactly once": func(s *Store) store.Store { return s.ExactlyOnce() },
	} {
		t.Run(name, func(t *testing.T) {
			conformance.RunHTTP(t, conformance.Harness{
				NewStore: func(t *testing.T) store.Store { return wrap(newStore(t, client, table...)) },
				Handler: func(t *testing.T, e *idem.Engine, f *conformance.Fixture) http.Handler {
					return f.ServeMux(e.Middleware)
				},
			})
		})
	}
}

// noOldItem is a client whose failed conditional writes come back
// without the item, as from an emulator that lacks
// ReturnValuesOnConditionCheckFailure: Claim must read it instead.
type noOldItem struct{ *dynamodb.Client }

func (c noOldItem) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := c.Client.PutItem(ctx, in, opts...)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		ccf.Item = nil
	}
	return out, err
}

// TestConformanceWithoutOldItem runs the suite on such a client.
func TestConformanceWithoutOldItem(t *testing.T) {
	client := newClient(t)
	table := newTable(t, client)
	conformance.RunStore(t, func(t *testing.T) store.Store {
		s, err := New(noOldItem{client}, append(table, WithKeyPrefix(randomName("t")+"#"))...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
