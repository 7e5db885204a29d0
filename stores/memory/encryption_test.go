package memstore_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	memstore "github.com/idemkit/idem/stores/memory"
)

// TestEncryption checks idem.WithEncryption on the memory store, whose
// raw record is what Get returns: the store's own copy.
func TestEncryption(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	conformance.RunEncryption(t, s, func(t *testing.T, scope, key string) []byte {
		rec, ok, err := s.Get(t.Context(), scope, key, time.Now())
		if err != nil || !ok {
			t.Fatalf("Get: %v %v", ok, err)
		}
		b := []byte(rec.Fingerprint)
		for k, vs := range rec.Response.Header {
			b = append(b, k...)
			for _, v := range vs {
				b = append(b, v...)
			}
		}
		return append(b, rec.Response.Body...)
	})
}

// TestPaymentOptions runs the payment options on the memory store.
func TestPaymentOptions(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	conformance.RunPaymentOptions(t, s)
}
