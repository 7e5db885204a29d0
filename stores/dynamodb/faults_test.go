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
	"github.com/idemkit/idem/core/store"
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
	if _, err := s.Claim(t.Context(), store.Claim{Scope: "s", Key: "k", Fingerprint: "f", Token: "t", Now: now, LeaseEnd: now.Add(time.Minute)}); !errors.As(err, &pte) {
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

// conflicting is a client whose next n transactions are cancelled for a
// TransactionConflict, as when the heartbeat's Extend of the record is in
// flight at the same moment; the others reach the server.
type conflicting struct {
	*dynamodb.Client
	n     atomic.Int32
	calls atomic.Int32
}

func (c *conflicting) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.calls.Add(1)
	if c.n.Add(-1) >= 0 {
		rs := make([]types.CancellationReason, len(in.TransactItems))
		for i := range rs {
			rs[i].Code = aws.String("None")
		}
		rs[len(rs)-1].Code = aws.String("TransactionConflict")
		return nil, &types.TransactionCanceledException{Message: aws.String("Transaction cancelled [TransactionConflict]"), CancellationReasons: rs}
	}
	return c.Client.TransactWriteItems(ctx, in, opts...)
}

// TestTransactionConflict checks that a commit cancelled for a
// TransactionConflict is sent again, and that one which keeps conflicting
// fails without writing, for the engine to release.
func TestTransactionConflict(t *testing.T) {
	client := newClient(t)
	cc := &conflicting{Client: client}
	table := newTable(t, client)
	orders := ordersTable(t, newTable(t, client, WithPartitionKey("id")))
	s, err := New(cc, append(table, WithKeyPrefix(randomName("t")+"#"))...)
	if err != nil {
		t.Fatal(err)
	}
	x := s.ExactlyOnce()
	now := time.Now()
	for _, tc := range []struct {
		key       string
		conflicts int32
		ok        bool
	}{{"once", 1, true}, {"always", maxConflicts, false}} {
		t.Run(tc.key, func(t *testing.T) {
			c := store.Claim{Scope: "s", Key: tc.key, Fingerprint: "f", Token: "t", Now: now, LeaseEnd: now.Add(time.Minute)}
			if r, err := x.Claim(t.Context(), c); err != nil || !r.Acquired {
				t.Fatalf("claim: %+v %v", r, err)
			}
			tx, _ := x.BeginTx(t.Context(), c.Hold())
			w, _ := Tx(tx.Context(t.Context()))
			if err := w.Put(types.Put{TableName: aws.String(orders), Item: map[string]types.AttributeValue{"id": attrS(tc.key)}}); err != nil {
				t.Fatal(err)
			}
			cc.n.Store(tc.conflicts)
			cc.calls.Store(0)
			err := tx.Commit(t.Context(), store.Completion{Result: store.Result{Head: []byte{1}}, Now: now, ExpiresAt: now.Add(time.Hour)})
			if (err == nil) != tc.ok || cc.calls.Load() != min(tc.conflicts+1, maxConflicts) {
				t.Fatalf("commit: %v after %d calls; want ok %v", err, cc.calls.Load(), tc.ok)
			}
			rec, _, _ := x.Get(t.Context(), c.Ref(), now)
			if want := map[bool]store.State{true: store.Completed, false: store.InProgress}[tc.ok]; rec.State != want {
				t.Fatalf("record %v, want %v", rec.State, want)
			}
		})
	}
}
