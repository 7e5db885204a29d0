package conformance_test

import (
	"errors"
	"testing"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/core/store"
)

// myStore stands for the store under test, say one backed by a database.
type myStore struct{ store.Store }

func openMyStore(keyPrefix string) (*myStore, error) {
	return nil, errors.New("openMyStore: stands for your store's constructor")
}

func (*myStore) Close() error { return nil }

// A store's own test file runs the whole contract with one call. Each
// subtest gets a fresh, empty store; on a shared server, a unique key prefix
// (or schema, or table) per subtest keeps them apart. In a real test file
// the function below is a top-level func TestConformance(t *testing.T).
func ExampleRunStore() {
	testConformance := func(t *testing.T) {
		conformance.RunStore(t, func(t *testing.T) store.Store {
			s, err := openMyStore("idem-test:" + t.Name() + ":")
			if err != nil {
				t.Fatalf("open store: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	}
	_ = testConformance
}
