package memstore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/core/store"
	memstore "github.com/idemkit/idem/stores/memory"
)

// TestEncryption checks idem.WithEncryption on the memory store, whose
// raw record is what Get returns: the store's own copy.
func TestEncryption(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	conformance.RunEncryption(t, s, func(t *testing.T, scope, key string) []byte {
		rec, ok, err := s.Get(t.Context(), store.Ref{Scope: scope, Key: key}, time.Now())
		if err != nil || !ok {
			t.Fatalf("Get: %v %v", ok, err)
		}
		b := append([]byte(rec.Fingerprint), rec.Result.Head...)
		return append(b, rec.Result.Body...)
	})
}

// TestPaymentOptions runs the payment options on the memory store.
func TestPaymentOptions(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	conformance.RunPaymentOptions(t, s)
}
