package redisstore

import (
	"testing"

	"github.com/idemkit/idem/conformance"
)

// TestEncryption checks idem.WithEncryption on Redis, reading the
// record's value straight from the server.
func TestEncryption(t *testing.T) {
	client := testClient(t)
	s := newTestStore(t, client)
	conformance.RunEncryption(t, withoutClock(s), func(t *testing.T, scope, key string) []byte {
		k, _ := recordKey(s.prefix, scope, key)
		b, err := client.Get(t.Context(), k).Bytes()
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		return b
	})
}

// TestPaymentOptions runs the payment options on Redis.
func TestPaymentOptions(t *testing.T) {
	conformance.RunPaymentOptions(t, newTestStore(t, testClient(t)))
}
