package dynamostore

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	idem "github.com/idemkit/idem/core"
)

// throttled is a client that answers the next n claims (PutItem) with
// DynamoDB's throttling error, as a table over its capacity does once the
// SDK's retries are spent; everything else reaches the server.
type throttled struct {
	*dynamodb.Client
	n atomic.Int32
}

func (c *throttled) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if c.n.Add(-1) >= 0 {
		return nil, &types.ProvisionedThroughputExceededException{Message: aws.String("The level of configured provisioned throughput for the table was exceeded.")}
	}
	return c.Client.PutItem(ctx, in, opts...)
}

// TestThrottling checks that throttling is a store failure: the engine
// answers 503 with Retry-After and runs nothing; the retry, once
// DynamoDB takes writes again, runs the handler.
func TestThrottling(t *testing.T) {
	client := newClient(t)
	tc := &throttled{Client: client}
	s, err := New(tc, append(newTable(t, client), WithKeyPrefix(randomName("t")+"#"))...)
	if err != nil {
		t.Fatal(err)
	}
	var pte *types.ProvisionedThroughputExceededException
	tc.n.Store(1)
	now := time.Now()
	if _, err := s.Claim(t.Context(), idem.Claim{Scope: "s", Key: "k", Fingerprint: "f", Token: "t", Now: now, LeaseEnd: now.Add(time.Minute)}); !errors.As(err, &pte) {
		t.Fatalf("claim: %v, want the throttling error wrapped", err)
	}
	e, err := idem.New(s, idem.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/orders", nil)
		req.Header.Set("Idempotency-Key", "throttled")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	tc.n.Store(1)
	if rec := post(); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || runs.Load() != 0 {
		t.Fatalf("throttled: %d, Retry-After %q, %d runs; want 503 with Retry-After and no run", rec.Code, rec.Header().Get("Retry-After"), runs.Load())
	}
	if rec := post(); rec.Code != http.StatusCreated || runs.Load() != 1 {
		t.Fatalf("retry: %d after %d runs; want 201 from one run", rec.Code, runs.Load())
	}
}
