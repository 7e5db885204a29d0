package pgxstore

import (
	"testing"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestEncryption checks idem.WithEncryption on PostgreSQL, reading the
// record's row straight from the table.
func TestEncryption(t *testing.T) {
	pool := newPool(t)
	s := newStore(t, pool)
	for name, store := range map[string]store.Store{"plain": s, "exactly once": s.ExactlyOnce()} {
		t.Run(name, func(t *testing.T) { conformance.RunEncryption(t, store, raw(pool, s)) })
	}
}

// raw reads a record's fingerprint, headers and body from s's table.
func raw(pool *pgxpool.Pool, s *Store) func(t *testing.T, scope, key string) []byte {
	return func(t *testing.T, scope, key string) []byte {
		var fp, headers, body []byte
		err := pool.QueryRow(t.Context(), `SELECT fingerprint, coalesce(headers, ''), coalesce(body, '') FROM `+quoted(s.Table())+
			` WHERE scope = $1 AND key = $2`, []byte(scope), key).Scan(&fp, &headers, &body)
		if err != nil {
			t.Fatal(err)
		}
		return append(append(fp, headers...), body...)
	}
}

// TestPaymentOptions runs the payment options on PostgreSQL, plain and
// exactly-once.
func TestPaymentOptions(t *testing.T) {
	s := newStore(t, newPool(t))
	for name, store := range map[string]store.Store{"plain": s, "exactly once": s.ExactlyOnce()} {
		t.Run(name, func(t *testing.T) { conformance.RunPaymentOptions(t, store) })
	}
}
