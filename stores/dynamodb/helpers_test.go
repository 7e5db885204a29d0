package dynamostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

const defaultDynamoURL = "http://127.0.0.1:8000"

// unavailable skips the test, or fails it when CI is set: in CI every
// server the tests need must be there.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this fails instead of skipping)", msg)
	}
	t.Skipf("%s; skipping (set CI=1 to make this a failure)", msg)
}

// testURL is the DynamoDB endpoint the tests use: IDEM_TEST_DYNAMODB_URL,
// by default dynalite behind scripts/dynalite-tx.js on port 8000
// (scripts/dynalite-start starts both).
func testURL() string {
	if u := os.Getenv("IDEM_TEST_DYNAMODB_URL"); u != "" {
		return u
	}
	return defaultDynamoURL
}

// newClient returns a client for the endpoint at testURL, with static
// credentials and region us-east-1, or skips the test when nothing
// listens there.
func newClient(t testing.TB) *dynamodb.Client {
	t.Helper()
	endpoint := testURL()
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		t.Fatalf("IDEM_TEST_DYNAMODB_URL=%q is not a URL: %v", endpoint, err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		unavailable(t, "DynamoDB at %s (IDEM_TEST_DYNAMODB_URL) is unreachable: %v; start one with scripts/dynalite-start", endpoint, err)
	}
	conn.Close()
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "idemtest", SecretAccessKey: "idemtest", Source: "tests"}, nil
		}),
	})
}

// randomName returns prefix and 12 random hex digits.
func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// newTable creates a fresh table with the layout opts give (through
// CreateTable) and deletes it when the test ends. It returns the options
// that name it, to pass to New with more.
func newTable(t testing.TB, client *dynamodb.Client, opts ...Option) []Option {
	t.Helper()
	opts = append([]Option{WithTable(randomName("idem_test_"))}, opts...)
	s, err := New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.CreateTable(ctx); err != nil {
		t.Fatalf("%v (is the server dynalite without scripts/dynalite-tx.js? start both with scripts/dynalite-start)", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(s.Table())}); err != nil {
			t.Errorf("deleting table %s: %v", s.Table(), err)
		}
	})
	return opts
}

// newStore returns a Store on the table opts name, under a fresh key
// prefix that no other store sees.
func newStore(t testing.TB, client *dynamodb.Client, opts ...Option) *Store {
	t.Helper()
	s, err := New(client, append(opts, WithKeyPrefix(randomName("t")+"#"))...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
