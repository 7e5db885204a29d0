package idemgrpc_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	idemgrpc "github.com/idemkit/idem/adapters/grpc"
	idemclient "github.com/idemkit/idem/client"
	idem "github.com/idemkit/idem/core"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// fake is a server the client interceptor calls in-process: answer gives
// the n-th attempt's error (1-based) and its header metadata.
type fake struct {
	answer func(n int) (metadata.MD, error)
	start  time.Time
	keys   []string
	at     []time.Duration // when each attempt began, since start
}

func (f *fake) invoke(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	f.keys = append(f.keys, md.Get(idemgrpc.DefaultKeyMetadata)...)
	f.at = append(f.at, time.Since(f.start))
	hdr, err := f.answer(len(f.at))
	for _, o := range opts {
		if h, ok := o.(grpc.HeaderCallOption); ok {
			*h.HeaderAddr = hdr
		}
	}
	return err
}

func inFlightErr(delay time.Duration) error {
	st, _ := status.New(codes.Aborted, "in flight").WithDetails(
		&errdetails.ErrorInfo{Domain: idemgrpc.ErrorDomain, Reason: idemgrpc.ReasonInFlight},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)},
	)
	return st.Err()
}

func unavailableErr(delay time.Duration) error {
	st := status.New(codes.Unavailable, "down")
	if delay >= 0 {
		st, _ = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	}
	return st.Err()
}

// run calls the interceptor built with opts against f, in a synctest
// bubble where only time passes, and returns the error and the Result.
func (f *fake) run(t *testing.T, ctx context.Context, opts ...idemgrpc.ClientOption) (idemgrpc.Result, error) {
	t.Helper()
	unary, err := idemgrpc.UnaryClientInterceptor(opts...)
	if err != nil {
		t.Fatal(err)
	}
	f.start = time.Now()
	var r idemgrpc.Result
	err = unary(ctx, unaryCall, &testpb.SimpleRequest{}, &testpb.SimpleResponse{}, nil, f.invoke, idemgrpc.Report(&r))
	return r, err
}

func TestClientRetries(t *testing.T) {
	t.Run("Unavailable with backoff, one key", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fake{answer: func(n int) (metadata.MD, error) {
				if n < 3 {
					return nil, unavailableErr(-1)
				}
				return nil, nil
			}}
			r, err := f.run(t, t.Context())
			if err != nil || r.Attempts != 3 || r.Replayed {
				t.Fatalf("%v %+v, want success after 3 attempts", err, r)
			}
			if len(f.keys) != 3 || f.keys[0] == "" || f.keys[0] != f.keys[1] || f.keys[1] != f.keys[2] || r.Key != f.keys[0] {
				t.Errorf("keys %q, result key %q: want one key on every attempt", f.keys, r.Key)
			}
			// Full jitter: up to 100ms, then up to 200ms.
			if w1, w2 := f.at[1]-f.at[0], f.at[2]-f.at[1]; w1 > 100*time.Millisecond || w2 > 200*time.Millisecond {
				t.Errorf("waits %v and %v, want at most 100ms and 200ms", w1, w2)
			}
		})
	})
	t.Run("RetryInfo sets the wait, capped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fake{answer: func(n int) (metadata.MD, error) {
				switch n {
				case 1:
					return nil, unavailableErr(2 * time.Second)
				case 2:
					return nil, unavailableErr(time.Hour)
				}
				return nil, nil
			}}
			if _, err := f.run(t, t.Context(), idemgrpc.WithRetry(idemclient.WithRetryAfterCap(3*time.Second))); err != nil {
				t.Fatal(err)
			}
			if f.at[1] != 2*time.Second || f.at[2] != 5*time.Second {
				t.Errorf("attempts at %v, want 0s, 2s, 5s", f.at)
			}
		})
	})
	t.Run("in flight does not count toward the attempts", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			replay := metadata.Pairs(idemgrpc.DefaultReplayMetadata, "true")
			f := &fake{answer: func(n int) (metadata.MD, error) {
				if n <= 6 {
					return nil, inFlightErr(0) // a zero hint: the backoff base still spaces the polls
				}
				return replay, nil
			}}
			r, err := f.run(t, t.Context(), idemgrpc.WithRetry(idemclient.WithMaxAttempts(2)))
			if err != nil || r.Attempts != 7 || !r.Replayed {
				t.Fatalf("%v %+v, want the replay on attempt 7", err, r)
			}
			if f.at[6] != 6*idemclient.DefaultBackoffBase {
				t.Errorf("7th attempt at %v, want %v", f.at[6], 6*idemclient.DefaultBackoffBase)
			}
		})
	})
	t.Run("the attempt limit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fake{answer: func(int) (metadata.MD, error) { return nil, unavailableErr(time.Second) }}
			r, err := f.run(t, t.Context(), idemgrpc.WithRetry(idemclient.WithMaxAttempts(3)))
			if status.Code(err) != codes.Unavailable || r.Attempts != 3 || len(f.at) != 3 {
				t.Errorf("%v %+v after %d attempts, want Unavailable after 3", err, r, len(f.at))
			}
		})
	})
	t.Run("the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fake{answer: func(int) (metadata.MD, error) { return nil, unavailableErr(time.Second) }}
			ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
			defer cancel()
			r, err := f.run(t, ctx, idemgrpc.WithRetry(idemclient.WithMaxAttempts(100)))
			// Attempts at 0s, 1s and 2s; the next would start at 3s, past the deadline.
			if status.Code(err) != codes.Unavailable || r.Attempts != 3 || time.Since(f.start) != 2*time.Second {
				t.Errorf("%v %+v, returned after %v; want Unavailable after 3 attempts, at 2s", err, r, time.Since(f.start))
			}
		})
	})
	t.Run("the budget", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := &fake{answer: func(int) (metadata.MD, error) { return nil, inFlightErr(time.Second) }}
			r, err := f.run(t, t.Context(), idemgrpc.WithRetry(idemclient.WithBudget(5*time.Second)))
			if status.Code(err) != codes.Aborted || r.Attempts != 6 {
				t.Errorf("%v %+v, want Aborted after 6 attempts (0s to 5s)", err, r)
			}
		})
	})
	t.Run("a cancelled wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			f := &fake{answer: func(int) (metadata.MD, error) {
				time.AfterFunc(500*time.Millisecond, cancel)
				return nil, unavailableErr(time.Second)
			}}
			r, err := f.run(t, ctx)
			if status.Code(err) != codes.Canceled || r.Attempts != 1 || time.Since(f.start) != 500*time.Millisecond {
				t.Errorf("%v %+v after %v, want Canceled at 500ms", err, r, time.Since(f.start))
			}
		})
	})
}

func TestClientDoesNotRetry(t *testing.T) {
	withInfo := func(code codes.Code) error {
		st, _ := status.New(code, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
		return st.Err()
	}
	for _, tc := range []struct {
		name string
		err  error
		hdr  metadata.MD
	}{
		{"OK", nil, nil},
		{"Aborted without RetryInfo", status.Error(codes.Aborted, "conflict"), nil},
		{"FailedPrecondition", status.Error(codes.FailedPrecondition, "reused"), nil},
		{"InvalidArgument", status.Error(codes.InvalidArgument, "bad key"), nil},
		{"Internal", status.Error(codes.Internal, "bug"), nil},
		{"ResourceExhausted with RetryInfo", withInfo(codes.ResourceExhausted), nil},
		{"DeadlineExceeded", status.Error(codes.DeadlineExceeded, "late"), nil},
		{"a replayed Unavailable", status.Error(codes.Unavailable, "stored"), metadata.Pairs(idemgrpc.DefaultReplayMetadata, "true")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fake{answer: func(int) (metadata.MD, error) { return tc.hdr, tc.err }}
				r, err := f.run(t, t.Context())
				if status.Code(err) != status.Code(tc.err) || r.Attempts != 1 || len(f.at) != 1 {
					t.Errorf("%v after %d attempts, want %v after 1", err, len(f.at), tc.err)
				}
			})
		})
	}
}

func TestClientKeys(t *testing.T) {
	ok := func(int) (metadata.MD, error) { return nil, nil }
	t.Run("the caller's key is kept", func(t *testing.T) {
		f := &fake{answer: ok}
		r, _ := f.run(t, withKey(t.Context(), "mine"))
		if len(f.keys) != 1 || f.keys[0] != "mine" || r.Key != "mine" {
			t.Errorf("keys %q, result %+v", f.keys, r)
		}
	})
	t.Run("an empty caller key is sent once, as it is", func(t *testing.T) {
		f := &fake{answer: func(int) (metadata.MD, error) { return nil, unavailableErr(0) }}
		r, err := f.run(t, withKey(t.Context(), ""))
		if status.Code(err) != codes.Unavailable || len(f.keys) != 1 || f.keys[0] != "" || r.Attempts != 0 {
			t.Errorf("%v keys %q result %+v", err, f.keys, r)
		}
	})
	t.Run("each logical call gets its own key", func(t *testing.T) {
		f := &fake{answer: ok}
		f.run(t, t.Context())
		f.run(t, t.Context())
		if len(f.keys) != 2 || f.keys[0] == f.keys[1] || len(f.keys[0]) != 36 {
			t.Errorf("keys %q", f.keys)
		}
	})
	t.Run("unprotected methods pass through", func(t *testing.T) {
		f := &fake{answer: func(int) (metadata.MD, error) { return nil, unavailableErr(0) }}
		r, _ := f.run(t, t.Context(), idemgrpc.WithMethods(func(string) bool { return false }))
		if len(f.at) != 1 || len(f.keys) != 0 || r.Attempts != 0 {
			t.Errorf("%d attempts, keys %q, result %+v", len(f.at), f.keys, r)
		}
	})
	t.Run("another key metadata name", func(t *testing.T) {
		var got []string
		unary, err := idemgrpc.UnaryClientInterceptor(idemgrpc.WithKeyMetadata("X-Request-Id"))
		if err != nil {
			t.Fatal(err)
		}
		unary(t.Context(), unaryCall, nil, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
			md, _ := metadata.FromOutgoingContext(ctx)
			got = md.Get("x-request-id")
			return nil
		})
		if len(got) != 1 || len(got[0]) != 36 {
			t.Errorf("x-request-id %q", got)
		}
	})
}

// The client interceptor against a real server: a retry that finds the
// first call in flight waits for it and gets its replay.
func TestClientThroughInFlight(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		started, finish := make(chan struct{}), make(chan struct{})
		var once sync.Once
		svc := &service{}
		svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			once.Do(func() { close(started) })
			<-finish
			return &testpb.SimpleResponse{Username: "paid"}, nil
		}
		addr := serve(t, newEngine(t, newStore(t)), svc, nil)
		plain := testpb.NewTestServiceClient(dial(t, addr))
		unary, err := idemgrpc.UnaryClientInterceptor()
		if err != nil {
			t.Fatal(err)
		}
		retrying := testpb.NewTestServiceClient(dial(t, addr, grpc.WithChainUnaryInterceptor(unary)))

		ctx := withKey(t.Context(), "pay-42")
		first := make(chan error, 1)
		go func() { _, _, _, err := call(ctx, plain, request("x")); first <- err }()
		<-started
		time.AfterFunc(300*time.Millisecond, func() { close(finish) })
		var r idemgrpc.Result
		resp, hdr, _, err := call(ctx, retrying, request("x"), idemgrpc.Report(&r))
		if err != nil || resp.GetUsername() != "paid" || !replayed(hdr) {
			t.Fatalf("retrying client: %v %v replayed=%v", resp, err, replayed(hdr))
		}
		if r.Key != "pay-42" || r.Attempts < 2 || !r.Replayed {
			t.Errorf("result %+v, want key pay-42, 2 attempts or more, replayed", r)
		}
		if err := <-first; err != nil {
			t.Error(err)
		}
		if n := svc.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

// A failing store answers Unavailable with RetryInfo; the client retries
// it up to its limit.
func TestClientRetriesStoreFailure(t *testing.T) {
	svc := &service{}
	engine := newEngine(t, failingStore{}, idem.WithHeartbeat(0), idem.WithLease(200*time.Millisecond))
	unary, err := idemgrpc.UnaryClientInterceptor(idemgrpc.WithRetry(idemclient.WithMaxAttempts(3)))
	if err != nil {
		t.Fatal(err)
	}
	c := testpb.NewTestServiceClient(dial(t, serve(t, engine, svc, nil), grpc.WithChainUnaryInterceptor(unary)))
	var r idemgrpc.Result
	_, _, _, err = call(t.Context(), c, request("x"), idemgrpc.Report(&r))
	if status.Code(err) != codes.Unavailable || r.Attempts != 3 || r.Key == "" {
		t.Errorf("%v %+v, want Unavailable after 3 attempts with one key", err, r)
	}
}

// No server at all: each attempt is Unavailable, and the client gives up
// at its limit with the last error.
func TestClientNoServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	unary, err := idemgrpc.UnaryClientInterceptor(idemgrpc.WithRetry(idemclient.WithMaxAttempts(3), idemclient.WithBackoff(10*time.Millisecond, 50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	c := testpb.NewTestServiceClient(dial(t, addr, grpc.WithChainUnaryInterceptor(unary)))
	var r idemgrpc.Result
	_, err = c.UnaryCall(t.Context(), request("x"), idemgrpc.Report(&r))
	if status.Code(err) != codes.Unavailable || r.Attempts != 3 || r.Replayed {
		t.Errorf("%v %+v, want Unavailable after 3 attempts", err, r)
	}
}

// TestClientReportNil passes Report(nil), alone and after Report(&r), on
// calls that end each way the interceptor reports: success, the retries
// given up, and the context ending during a wait. A nil is ignored: the
// call is made and retried as without it, and an earlier Report is
// still filled.
func TestClientReportNil(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error // every attempt's
		cancelAt time.Duration
		want     codes.Code
	}{
		{"success", nil, 0, codes.OK},
		{"the retries given up", unavailableErr(0), 0, codes.Unavailable},
		{"the context ended during a wait", unavailableErr(time.Second), 500 * time.Millisecond, codes.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				unary, err := idemgrpc.UnaryClientInterceptor(idemgrpc.WithRetry(idemclient.WithMaxAttempts(2)))
				if err != nil {
					t.Fatal(err)
				}
				call := func(opts ...grpc.CallOption) error {
					ctx, cancel := context.WithCancel(t.Context())
					defer cancel()
					if tc.cancelAt > 0 {
						time.AfterFunc(tc.cancelAt, cancel)
					}
					f := &fake{answer: func(int) (metadata.MD, error) { return nil, tc.err }, start: time.Now()}
					return unary(ctx, unaryCall, &testpb.SimpleRequest{}, &testpb.SimpleResponse{}, nil, f.invoke, opts...)
				}
				if err := call(idemgrpc.Report(nil)); status.Code(err) != tc.want {
					t.Errorf("Report(nil): error %v, want %v", err, tc.want)
				}
				var r idemgrpc.Result
				if err := call(idemgrpc.Report(&r), idemgrpc.Report(nil)); status.Code(err) != tc.want {
					t.Errorf("Report(&r), Report(nil): error %v, want %v", err, tc.want)
				}
				if r.Key == "" || r.Attempts == 0 {
					t.Errorf("Report(&r) before Report(nil) got %+v, want it filled", r)
				}
			})
		})
	}
}
