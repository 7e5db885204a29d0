package mysqlstore

import (
	"testing"

	"github.com/idemkit/idem/conformance"
)

// TestEncryption checks idem.WithEncryption on MySQL, reading the
// record's row straight from the table.
func TestEncryption(t *testing.T) {
	db := newDB(t, 0)
	s := newStore(t, db)
	conformance.RunEncryption(t, s, func(t *testing.T, scope, key string) []byte {
		var fp, headers, body []byte
		err := db.QueryRowContext(t.Context(), "SELECT fingerprint, coalesce(headers, ''), coalesce(body, '') FROM "+quoteIdent(s.Table())+
			" WHERE scope = ? AND `key` = ?", []byte(scope), []byte(key)).Scan(&fp, &headers, &body)
		if err != nil {
			t.Fatal(err)
		}
		return append(append(fp, headers...), body...)
	})
}

// TestPaymentOptions runs the payment options on MySQL.
func TestPaymentOptions(t *testing.T) {
	conformance.RunPaymentOptions(t, newStore(t, newDB(t, 0)))
}
