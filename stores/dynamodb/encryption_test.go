package dynamostore

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idem/conformance"
)

// TestEncryption checks idem.WithEncryption on DynamoDB, reading the
// record's item straight from the table.
func TestEncryption(t *testing.T) {
	client := newClient(t)
	s := newStore(t, client, newTable(t, client)...)
	conformance.RunEncryption(t, s, func(t *testing.T, scope, key string) []byte {
		var b []byte
		for name, v := range rawItem(t, client, s, scope, key) {
			b = append(b, name...)
			switch v := v.(type) {
			case *types.AttributeValueMemberB:
				b = append(b, v.Value...)
			case *types.AttributeValueMemberS:
				b = append(b, v.Value...)
			case *types.AttributeValueMemberN:
				b = append(b, v.Value...)
			}
		}
		return b
	})
}

// TestPaymentOptions runs the payment options on DynamoDB.
func TestPaymentOptions(t *testing.T) {
	client := newClient(t)
	conformance.RunPaymentOptions(t, newStore(t, client, newTable(t, client)...))
}
