package dynamostore

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
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

// lossyTransport sends every request to the server but, once armed,
// loses the response to the first PutItem after DynamoDB applied it: the
// connection is reset, or the answer is replaced by a 500. The AWS SDK
// retries both by itself, and its second attempt finds what the first
// one wrote.
type lossyTransport struct {
	status  int // 0: a reset connection; otherwise the status returned
	armed   atomic.Bool
	dropped atomic.Int32
	puts    atomic.Int32
}

func (l *lossyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.PutItem" {
		return resp, err
	}
	l.puts.Add(1)
	if !l.armed.CompareAndSwap(true, false) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	l.dropped.Add(1)
	if l.status == 0 {
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	}
	body := `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}`
	return &http.Response{
		Status: http.StatusText(l.status), StatusCode: l.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r,
	}, nil
}

// TestClaimResponseLost checks a claim whose PutItem DynamoDB applied but
// whose response was lost (a reset connection, or a 500), and which the
// SDK sent again by itself: the second attempt fails its condition on
// the item the first one wrote, holding the claim's own token, and the
// claim is acquired, not blocked by itself (which would make the engine
// answer 409 and leave the key blocked for the whole lease, with nobody
// to release it). So it is on an emulator that returns no item with the
// failed condition, where Claim reads it. The claim is then held:
// Release with its token deletes the record. A record of another token
// still blocks.
func TestClaimResponseLost(t *testing.T) {
	base := newClient(t)
	table := newTable(t, base)
	for _, tc := range []struct {
		name      string
		status    int
		noOldItem bool
	}{
		{name: "reset"},
		{name: "500", status: http.StatusInternalServerError},
		{name: "reset, no old item", noOldItem: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lossy := &lossyTransport{status: tc.status}
			client := dynamodb.New(base.Options(), func(o *dynamodb.Options) {
				o.HTTPClient = &http.Client{Transport: lossy}
			})
			var c Client = client
			if tc.noOldItem {
				c = noOldItem{client}
			}
			s, err := New(c, append(table, WithKeyPrefix(randomName("t")+"#"))...)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			claim := store.Claim{Scope: "s", Key: "k", Fingerprint: "fp", Token: "tok-A", Now: now, LeaseEnd: now.Add(15 * time.Second)}
			lossy.armed.Store(true)
			res, err := s.Claim(t.Context(), claim)
			if lossy.dropped.Load() != 1 || lossy.puts.Load() < 2 {
				t.Fatalf("%d responses lost, %d PutItem sent; want 1 lost and the SDK's retry", lossy.dropped.Load(), lossy.puts.Load())
			}
			if err != nil {
				t.Fatalf("claim after a lost response: %v", err)
			}
			if !res.Acquired {
				t.Fatalf("claim after a lost response: blocked by its own record %+v; want acquired", *res.Existing)
			}

			other := claim
			other.Token = "tok-B"
			if res, err := s.Claim(t.Context(), other); err != nil || res.Acquired || res.Existing.State != store.InProgress {
				t.Fatalf("a claim of another token: %+v, %v; want blocked by the first", res, err)
			}
			if err := s.Release(t.Context(), claim.Hold()); err != nil {
				t.Fatalf("release of the claim: %v", err)
			}
			if _, ok, err := s.Get(t.Context(), claim.Ref(), now); err != nil || ok {
				t.Fatalf("after the release: found %v, %v; want the record gone", ok, err)
			}
		})
	}
}
