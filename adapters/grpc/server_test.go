package idemgrpc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	idemgrpc "github.com/idemkit/idem/adapters/grpc"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	pgxstore "github.com/idemkit/idem/stores/pgx"
	"github.com/jackc/pgx/v5"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// forEachStore runs test once per store kind, each subtest with stores
// of its own.
func forEachStore(t *testing.T, test func(t *testing.T, newStore func(testing.TB) idem.Store)) {
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) { test(t, k.new) })
	}
}

func withKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, idemgrpc.DefaultKeyMetadata, key)
}

func request(body string) *testpb.SimpleRequest {
	return &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}}
}

// call makes one UnaryCall and returns its answer with both metadata sets.
func call(ctx context.Context, c testpb.TestServiceClient, req *testpb.SimpleRequest, opts ...grpc.CallOption) (*testpb.SimpleResponse, metadata.MD, metadata.MD, error) {
	var hdr, trl metadata.MD
	resp, err := c.UnaryCall(ctx, req, append(opts, grpc.Header(&hdr), grpc.Trailer(&trl))...)
	return resp, hdr, trl, err
}

func replayed(hdr metadata.MD) bool {
	v := hdr.Get(idemgrpc.DefaultReplayMetadata)
	return len(v) == 1 && v[0] == "true"
}

func TestReplay(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		svc := &service{}
		svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			n := svc.runs.Load()
			if err := grpc.SetHeader(ctx, metadata.Pairs("x-order", fmt.Sprint(n), "x-bin", "\x00\xff")); err != nil {
				return nil, err
			}
			if err := grpc.SendHeader(ctx, metadata.Pairs("x-sent", "yes")); err != nil {
				return nil, err
			}
			if err := grpc.SetTrailer(ctx, metadata.Pairs("x-trace", "t1", "x-trace", "t2")); err != nil {
				return nil, err
			}
			return &testpb.SimpleResponse{Username: fmt.Sprintf("order-%d", n), Payload: req.GetPayload()}, nil
		}
		c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newStore(t)), svc, nil)))
		ctx := withKey(t.Context(), "order-key-1")

		first, hdr1, trl1, err := call(ctx, c, request("tea"))
		if err != nil {
			t.Fatal(err)
		}
		if replayed(hdr1) {
			t.Error("the first answer is marked replayed")
		}
		for range 2 {
			again, hdr, trl, err := call(ctx, c, request("tea"))
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(first, again) {
				t.Errorf("replay %v, want %v", again, first)
			}
			if !replayed(hdr) {
				t.Errorf("replay header %v has no %s: true", hdr, idemgrpc.DefaultReplayMetadata)
			}
			for _, name := range []string{"x-order", "x-bin", "x-sent"} {
				if got, want := hdr.Get(name), hdr1.Get(name); len(want) != 1 || strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("header %s: replayed %q, first %q", name, got, want)
				}
			}
			if got, want := strings.Join(trl.Get("x-trace"), ","), "t1,t2"; got != want || strings.Join(trl1.Get("x-trace"), ",") != want {
				t.Errorf("trailer x-trace: replayed %q, first %q, want %q", got, trl1.Get("x-trace"), want)
			}
		}
		if n := svc.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

func TestMismatch(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		svc := &service{}
		c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newStore(t)), svc, nil)))
		ctx := withKey(t.Context(), "k")
		if _, _, _, err := call(ctx, c, request("tea")); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := call(ctx, c, request("coffee"))
		if status.Code(err) != codes.FailedPrecondition || errorInfo(err) != idemgrpc.ReasonMismatch {
			t.Errorf("same key, other request: %v (reason %q), want FailedPrecondition %s", err, errorInfo(err), idemgrpc.ReasonMismatch)
		}
		// The record is untouched: the first request still replays.
		if resp, hdr, _, err := call(ctx, c, request("tea")); err != nil || !replayed(hdr) || resp.GetUsername() != "run-1" {
			t.Errorf("first request again: %v %v replayed=%v", resp, err, replayed(hdr))
		}
		// The same key on another method is another scope.
		if _, err := c.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Errorf("same key on another method: %v", err)
		}
		if n := svc.runs.Load(); n != 2 {
			t.Errorf("handlers ran %d times, want 2", n)
		}
	})
}

func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		svc := &service{}
		svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			time.Sleep(100 * time.Millisecond)
			return &testpb.SimpleResponse{Username: "the-one"}, nil
		}
		c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newStore(t)), svc, nil)))
		ctx := withKey(t.Context(), "dup")
		const n = 50
		var wg sync.WaitGroup
		errs := make([]error, n)
		resps := make([]*testpb.SimpleResponse, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				resps[i], _, _, errs[i] = call(ctx, c, request("same"))
			})
		}
		close(start)
		wg.Wait()
		ok, aborted := 0, 0
		for i, err := range errs {
			switch {
			case err == nil && resps[i].GetUsername() == "the-one":
				ok++
			case status.Code(err) == codes.Aborted && errorInfo(err) == idemgrpc.ReasonInFlight:
				aborted++
			default:
				t.Errorf("call %d: %v %v", i, resps[i], err)
			}
		}
		if got := svc.runs.Load(); got != 1 {
			t.Errorf("%d duplicates ran the handler %d times, want 1", n, got)
		}
		if ok == 0 {
			t.Error("no call got the answer")
		}
		t.Logf("%d answered, %d in flight", ok, aborted)
	})
}

func TestInFlight(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		started, finish := make(chan struct{}), make(chan struct{})
		svc := &service{}
		svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			close(started)
			<-finish
			return &testpb.SimpleResponse{Username: "slow"}, nil
		}
		c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newStore(t)), svc, nil)))
		ctx := withKey(t.Context(), "slow-key")
		done := make(chan error, 1)
		go func() { _, _, _, err := call(ctx, c, request("x")); done <- err }()
		<-started

		_, _, _, err := call(ctx, c, request("x"))
		d, hasDelay := retryDelay(err)
		if status.Code(err) != codes.Aborted || errorInfo(err) != idemgrpc.ReasonInFlight || !hasDelay {
			t.Fatalf("while in flight: %v (reason %q, retry info %v)", err, errorInfo(err), hasDelay)
		}
		if d <= 0 || d > 50*time.Millisecond {
			t.Errorf("retry delay %v, want the engine's hint, 50ms", d)
		}
		close(finish)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if resp, hdr, _, err := call(ctx, c, request("x")); err != nil || !replayed(hdr) || resp.GetUsername() != "slow" {
			t.Errorf("after it finished: %v %v replayed=%v", resp, err, replayed(hdr))
		}
		if n := svc.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

func TestErrorReleases(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		svc := &service{}
		svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			if svc.runs.Load() == 1 {
				_ = grpc.SetTrailer(ctx, metadata.Pairs("x-why", "busy"))
				return nil, status.Error(codes.ResourceExhausted, "busy")
			}
			return &testpb.SimpleResponse{Username: "second"}, nil
		}
		c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newStore(t)), svc, nil)))
		ctx := withKey(t.Context(), "k")
		_, hdr, trl, err := call(ctx, c, request("x"))
		if status.Code(err) != codes.ResourceExhausted || replayed(hdr) {
			t.Fatalf("first: %v, replayed=%v; want the handler's ResourceExhausted", err, replayed(hdr))
		}
		if got := trl.Get("x-why"); len(got) != 1 || got[0] != "busy" {
			t.Errorf("the handler's trailer on its error: %v", trl)
		}
		resp, hdr, _, err := call(ctx, c, request("x"))
		if err != nil || resp.GetUsername() != "second" || replayed(hdr) {
			t.Errorf("retry: %v %v replayed=%v; want a second run", resp, err, replayed(hdr))
		}
		if n := svc.runs.Load(); n != 2 {
			t.Errorf("handler ran %d times, want 2", n)
		}
	})
}

// A handler that returns an idem.FinalError must not make Engine.Do
// store the error's text: only WithFinalCodes decides.
func TestErrorReleasesEvenMarkedFinal(t *testing.T) {
	svc := &service{}
	svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		return nil, idem.Final(status.Error(codes.Unavailable, "down"))
	}
	c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newMemoryStore(t)), svc, nil)))
	ctx := withKey(t.Context(), "k")
	for range 2 {
		if _, hdr, _, err := call(ctx, c, request("x")); replayed(hdr) || err == nil {
			t.Errorf("got %v replayed=%v, want the handler's error, not replayed", err, replayed(hdr))
		}
	}
	if n := svc.runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}

func TestFinalCodeStored(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		svc := &service{}
		svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			_ = grpc.SetHeader(ctx, metadata.Pairs("x-run", fmt.Sprint(svc.runs.Load())))
			st, _ := status.New(codes.FailedPrecondition, "insufficient funds").WithDetails(&errdetails.PreconditionFailure{
				Violations: []*errdetails.PreconditionFailure_Violation{{Type: "BALANCE", Subject: "acct/1", Description: "too low"}},
			})
			return nil, st.Err()
		}
		opts := []idemgrpc.Option{idemgrpc.WithFinalCodes(codes.FailedPrecondition, codes.InvalidArgument)}
		c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newStore(t)), svc, opts)))
		ctx := withKey(t.Context(), "pay-1")
		_, hdr1, _, err1 := call(ctx, c, request("pay"))
		_, hdr2, _, err2 := call(ctx, c, request("pay"))
		if replayed(hdr1) || !replayed(hdr2) {
			t.Errorf("replayed: first %v, second %v; want false, true", replayed(hdr1), replayed(hdr2))
		}
		if !proto.Equal(status.Convert(err1).Proto(), status.Convert(err2).Proto()) {
			t.Errorf("replayed status %v, want %v", status.Convert(err2).Proto(), status.Convert(err1).Proto())
		}
		if status.Code(err2) != codes.FailedPrecondition || len(status.Convert(err2).Details()) != 1 {
			t.Errorf("replayed %v, want FailedPrecondition with its detail", err2)
		}
		if got := hdr2.Get("x-run"); len(got) != 1 || got[0] != "1" {
			t.Errorf("replayed header x-run %v, want the first run's", got)
		}
		if n := svc.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

func TestPanicReleases(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		svc := &service{}
		svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			if svc.runs.Load() == 1 {
				panic("boom")
			}
			return &testpb.SimpleResponse{Username: "recovered"}, nil
		}
		c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newStore(t)), svc, nil)))
		ctx := withKey(t.Context(), "k")
		if _, _, _, err := call(ctx, c, request("x")); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("first: %v, want the recovery interceptor's Internal", err)
		}
		if resp, hdr, _, err := call(ctx, c, request("x")); err != nil || resp.GetUsername() != "recovered" || replayed(hdr) {
			t.Errorf("retry: %v %v replayed=%v; want a second run", resp, err, replayed(hdr))
		}
		if n := svc.runs.Load(); n != 2 {
			t.Errorf("handler ran %d times, want 2", n)
		}
	})
}

func TestKeyRules(t *testing.T) {
	svc := &service{}
	opts := []idemgrpc.Option{idemgrpc.ForMethod(emptyCall, idem.Optional())}
	c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newMemoryStore(t)), svc, opts)))
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		md     []string // pairs
		reason string
	}{
		{"missing", nil, idemgrpc.ReasonMissingKey},
		{"empty", []string{"idempotency-key", ""}, idemgrpc.ReasonInvalidKey},
		{"two values", []string{"idempotency-key", "a", "idempotency-key", "b"}, idemgrpc.ReasonInvalidKey},
		{"a list", []string{"idempotency-key", "a, b"}, idemgrpc.ReasonInvalidKey},
		{"a space", []string{"idempotency-key", "a b"}, idemgrpc.ReasonInvalidKey},
		{"too long", []string{"idempotency-key", strings.Repeat("k", idem.MaxKeyLength+1)}, idemgrpc.ReasonInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := call(metadata.AppendToOutgoingContext(ctx, tc.md...), c, request("x"))
			if status.Code(err) != codes.InvalidArgument || errorInfo(err) != tc.reason {
				t.Errorf("%v (reason %q), want InvalidArgument %s", err, errorInfo(err), tc.reason)
			}
		})
	}
	if n := svc.runs.Load(); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
	// A quoted key is the same key as the bare one.
	if _, _, _, err := call(withKey(ctx, `"q1"`), c, request("x")); err != nil {
		t.Fatal(err)
	}
	if _, hdr, _, err := call(withKey(ctx, "q1"), c, request("x")); err != nil || !replayed(hdr) {
		t.Errorf("bare form of a quoted key: %v replayed=%v", err, replayed(hdr))
	}
	// Optional: no key runs unprotected, every time.
	for range 2 {
		if _, err := c.EmptyCall(ctx, &testpb.Empty{}); err != nil {
			t.Errorf("optional method without a key: %v", err)
		}
	}
	if n := svc.runs.Load(); n != 3 {
		t.Errorf("handlers ran %d times, want 3", n)
	}
}

func TestMethodPolicies(t *testing.T) {
	svc := &service{}
	// Each level goes on top of the one before: UnaryCall is required by
	// its service over "*", EmptyCall skipped by its own pattern. (Skip is
	// the shared policy's, as in HTTP: nothing undoes it, and options under
	// it are refused; see TestBadOptions.)
	opts := []idemgrpc.Option{
		idemgrpc.ForMethod("*", idem.Optional()),
		idemgrpc.ForMethod("/grpc.testing.TestService/*", idem.Required(), idem.TTL(time.Hour)),
		idemgrpc.ForMethod(emptyCall, idem.Skip()),
	}
	var mu sync.Mutex
	var outcomes []string
	observe := idem.WithObserver(func(_ context.Context, ev idem.Event) {
		mu.Lock()
		defer mu.Unlock()
		outcomes = append(outcomes, string(ev.Outcome)+" "+ev.Method+" "+ev.Route)
	})
	c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newMemoryStore(t), observe), svc, opts)))
	ctx := t.Context()
	if _, _, _, err := call(ctx, c, request("x")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("UnaryCall, required there, without a key: %v", err)
	}
	if _, _, _, err := call(metadata.AppendToOutgoingContext(ctx, "idempotency-key", "a b"), c, request("x")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("UnaryCall with a bad key: %v", err)
	}
	// EmptyCall is skipped: even a bad key passes.
	if _, err := c.EmptyCall(metadata.AppendToOutgoingContext(ctx, "idempotency-key", "a b"), &testpb.Empty{}); err != nil {
		t.Errorf("EmptyCall, skipped: %v", err)
	}
	// Calls Do never runs still reach the observer, as HTTP's do.
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"missing_key grpc " + unaryCall,
		"invalid_key grpc " + unaryCall,
		"skipped grpc /grpc.testing.TestService/EmptyCall",
	}
	if !slices.Equal(outcomes, want) {
		t.Errorf("events %q, want %q", outcomes, want)
	}
}

// AIP-155 style: the key is a field of the request.
func TestKeyFunc(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		svc := &service{}
		opts := []idemgrpc.Option{idemgrpc.WithKeyFunc(idemgrpc.FieldKey("response_status.message"))}
		c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newStore(t)), svc, opts)))
		ctx := t.Context()
		req := func(requestID, body string) *testpb.SimpleRequest {
			r := request(body)
			r.ResponseStatus = &testpb.EchoStatus{Message: requestID}
			return r
		}
		first, _, _, err := call(ctx, c, req("9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d", "tea"))
		if err != nil {
			t.Fatal(err)
		}
		again, hdr, _, err := call(ctx, c, req("9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d", "tea"))
		if err != nil || !replayed(hdr) || !proto.Equal(first, again) {
			t.Errorf("same request_id: %v %v replayed=%v, want the replay of %v", again, err, replayed(hdr), first)
		}
		if _, _, _, err := call(ctx, c, req("9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d", "coffee")); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("same request_id, other request: %v, want FailedPrecondition", err)
		}
		// The field wins over the metadata; without it, the metadata is used.
		if _, hdr, _, err := call(withKey(ctx, "other"), c, req("9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d", "tea")); err != nil || !replayed(hdr) {
			t.Errorf("field and metadata: %v replayed=%v, want the field's replay", err, replayed(hdr))
		}
		if _, _, _, err := call(withKey(ctx, "md-key"), c, request("tea")); err != nil {
			t.Errorf("metadata key, no field: %v", err)
		}
		if _, _, _, err := call(ctx, c, request("tea")); status.Code(err) != codes.InvalidArgument || errorInfo(err) != idemgrpc.ReasonMissingKey {
			t.Errorf("neither: %v", err)
		}
		if _, _, _, err := call(ctx, c, req("not\x01ascii", "tea")); status.Code(err) != codes.InvalidArgument || errorInfo(err) != idemgrpc.ReasonInvalidKey {
			t.Errorf("a field key that is not printable: %v (reason %q)", err, errorInfo(err))
		}
		if n := svc.runs.Load(); n != 2 {
			t.Errorf("handler ran %d times, want 2", n)
		}
	})
}

func TestNamespaceScopesKeys(t *testing.T) {
	svc := &service{}
	opts := []idemgrpc.Option{idemgrpc.WithNamespace(func(ctx context.Context) string {
		v := metadata.ValueFromIncomingContext(ctx, "x-tenant")
		return strings.Join(v, ",")
	})}
	c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newMemoryStore(t)), svc, opts)))
	for _, tenant := range []string{"acme", "globex", "acme"} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", tenant, "idempotency-key", "shared")
		if _, _, _, err := call(ctx, c, request("x")); err != nil {
			t.Fatal(err)
		}
	}
	if n := svc.runs.Load(); n != 2 {
		t.Errorf("handler ran %d times for two tenants, want 2", n)
	}
}

func TestStoreFailure(t *testing.T) {
	svc := &service{}
	engine := newEngine(t, failingStore{}, idem.WithHeartbeat(0), idem.WithLease(200*time.Millisecond))
	c := testpb.NewTestServiceClient(dial(t, serve(t, engine, svc, nil)))
	_, _, _, err := call(withKey(t.Context(), "k"), c, request("x"))
	d, ok := retryDelay(err)
	if status.Code(err) != codes.Unavailable || errorInfo(err) != idemgrpc.ReasonStoreFailure || !ok || d != 50*time.Millisecond {
		t.Errorf("%v (reason %q, delay %v %v), want Unavailable with RetryInfo 50ms", err, errorInfo(err), d, ok)
	}
	if strings.Contains(err.Error(), "10.0.0.1") {
		t.Errorf("the store's error reached the client: %v", err)
	}
	if n := svc.runs.Load(); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
}

// failingStore is a store whose every call fails.
type failingStore struct{}

var errDown = errors.New("dial tcp 10.0.0.1:6379: connection refused")

func (failingStore) Claim(context.Context, store.Claim) (store.ClaimResult, error) {
	return store.ClaimResult{}, errDown
}
func (failingStore) Complete(context.Context, store.Hold, store.Completion) error { return errDown }
func (failingStore) Release(context.Context, store.Hold) error                    { return errDown }

// In wait mode (idem.WithWait) a duplicate in flight waits for the first
// call and gets its replay instead of Aborted.
func TestWaitMode(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		started := make(chan struct{})
		svc := &service{}
		svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			close(started)
			time.Sleep(200 * time.Millisecond)
			return &testpb.SimpleResponse{Username: "waited"}, nil
		}
		engine := newEngine(t, newStore(t), idem.WithWait(5*time.Second))
		c := testpb.NewTestServiceClient(dial(t, serve(t, engine, svc, nil)))
		ctx := withKey(t.Context(), "w")
		first := make(chan error, 1)
		go func() { _, _, _, err := call(ctx, c, request("x")); first <- err }()
		<-started
		resp, hdr, _, err := call(ctx, c, request("x"))
		if err != nil || !replayed(hdr) || resp.GetUsername() != "waited" {
			t.Errorf("the duplicate: %v %v replayed=%v, want the replay", resp, err, replayed(hdr))
		}
		if err := <-first; err != nil {
			t.Error(err)
		}
		if n := svc.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

// With an exactly-once store the handler's context carries the
// transaction that commits with the stored answer: a released error rolls
// the handler's writes back, and a replay writes nothing.
func TestExactlyOnce(t *testing.T) {
	store, pool := newPostgres(t)
	table := pgx.Identifier{"idemgrpc_charges_" + randomName()}.Sanitize()
	if _, err := pool.Exec(t.Context(), "CREATE TABLE "+table+" (id text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+table) })
	svc := &service{}
	svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		tx, ok := pgxstore.Tx(ctx)
		if !ok {
			return nil, status.Error(codes.Internal, "no transaction in the handler's context")
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", string(req.GetPayload().GetBody())); err != nil {
			return nil, err
		}
		if svc.runs.Load() == 1 {
			return nil, status.Error(codes.Unavailable, "try again")
		}
		return &testpb.SimpleResponse{Username: "charged"}, nil
	}
	c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, store.ExactlyOnce()), svc, nil)))
	ctx := withKey(t.Context(), "once")
	if _, _, _, err := call(ctx, c, request("c1")); status.Code(err) != codes.Unavailable {
		t.Fatalf("first: %v, want the handler's Unavailable", err)
	}
	for range 2 {
		if resp, _, _, err := call(ctx, c, request("c1")); err != nil || resp.GetUsername() != "charged" {
			t.Fatalf("%v %v", resp, err)
		}
	}
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 || svc.runs.Load() != 2 {
		t.Errorf("%d rows after %d runs, want 1 row after 2", n, svc.runs.Load())
	}
}

// TestResultNotKept: a response the store kept without its body (past the
// memory store's byte budget here) is never replayed as an empty success:
// the retry gets DataLoss, and the handler does not run again.
func TestResultNotKept(t *testing.T) {
	s := newTinyMemoryStore(64)
	svc := &service{}
	svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		return &testpb.SimpleResponse{Username: strings.Repeat("u", 256)}, nil
	}
	c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, s), svc, nil)))
	ctx := withKey(t.Context(), "big-answer")
	if _, _, _, err := call(ctx, c, request("tea")); err != nil {
		t.Fatal(err)
	}
	_, _, _, err := call(ctx, c, request("tea"))
	if status.Code(err) != codes.DataLoss {
		t.Errorf("retry of an answer kept without its body: %v, want DataLoss", err)
	}
	if n := svc.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// With encryption, an answer is sealed, replays under the ring that
// sealed it (and a rotated one), and is DataLoss with its reason under a
// ring without its key: no replay, and no second run. On every store.
func TestEncryptedResults(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		s := newStore(t)
		key := func(id string, b byte) idem.EncryptionKey {
			return idem.EncryptionKey{ID: id, Secret: bytes.Repeat([]byte{b}, 32)}
		}
		svc := &service{}
		ctx := withKey(t.Context(), "sealed-"+randomName())
		client := func(keys ...idem.EncryptionKey) testpb.TestServiceClient {
			return testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, s, idem.WithEncryption(keys...)), svc, nil)))
		}
		first, rotated, other := client(key("k1", 1)), client(key("k1", 1), key("k2", 2)), client(key("k2", 2))
		want, _, _, err := call(ctx, first, request("tea"))
		if err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]testpb.TestServiceClient{"the same ring": first, "a rotated ring": rotated} {
			got, hdr, _, err := call(ctx, c, request("tea"))
			if err != nil || !replayed(hdr) || got.GetUsername() != want.GetUsername() {
				t.Errorf("retry under %s: %v replayed=%v %v", name, got, replayed(hdr), err)
			}
		}
		_, _, _, err = call(ctx, other, request("tea"))
		if status.Code(err) != codes.DataLoss || errorInfo(err) != idemgrpc.ReasonUnreadable {
			t.Errorf("retry under another key: %v (reason %q), want DataLoss %s", err, errorInfo(err), idemgrpc.ReasonUnreadable)
		}
		if n := svc.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}
