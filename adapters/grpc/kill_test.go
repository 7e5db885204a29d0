package idemgrpc_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	idemgrpc "github.com/idemkit/idem/adapters/grpc"
	idemclient "github.com/idemkit/idem/client"
	idem "github.com/idemkit/idem/core"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// The test binary doubles as the client that gets killed: with
// IDEMGRPC_TEST_HELPER=client it calls UnaryCall on IDEMGRPC_TEST_ADDR
// with the key IDEMGRPC_TEST_KEY through the client interceptor, and
// waits.
func TestMain(m *testing.M) {
	if os.Getenv("IDEMGRPC_TEST_HELPER") == "client" {
		os.Exit(helperClient())
	}
	os.Exit(m.Run())
}

func helperClient() int {
	unary, err := idemgrpc.UnaryClientInterceptor()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cc, err := grpc.NewClient(os.Getenv("IDEMGRPC_TEST_ADDR"),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithChainUnaryInterceptor(unary))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(withKey(context.Background(), os.Getenv("IDEMGRPC_TEST_KEY")), time.Minute)
	defer cancel()
	_, err = testpb.NewTestServiceClient(cc).UnaryCall(ctx, request("charge"))
	fmt.Fprintln(os.Stderr, "the call returned, though it should have been killed:", err)
	return 1
}

// startHelper runs the helper client against addr with key; it is killed
// when the test ends, if it is still running.
func startHelper(t *testing.T, addr, key string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "IDEMGRPC_TEST_HELPER=client", "IDEMGRPC_TEST_ADDR="+addr, "IDEMGRPC_TEST_KEY="+key)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// A client process killed with SIGKILL while its call runs, then a new
// client with the same key: the charge is made once, whether the handler
// finishes after its client is gone (the retry waits and gets the replay)
// or stops when its context is cancelled (the key is released and the
// retry runs it, once).
func TestKilledClientRetried(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(testing.TB) idem.Store) {
		for _, tc := range []struct {
			name         string
			honourCancel bool
		}{
			{"handler finishes", false},
			{"handler stops on cancel", true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				started, finish, stopped := make(chan struct{}), make(chan struct{}), make(chan struct{})
				var once sync.Once
				var charges atomic.Int64
				svc := &service{}
				svc.fn = func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
					first := false
					once.Do(func() { first = true; close(started) })
					if first {
						select {
						case <-finish:
						case <-ctx.Done():
							if tc.honourCancel {
								close(stopped)
								return nil, status.FromContextError(ctx.Err()).Err()
							}
							<-finish
						}
					}
					n := charges.Add(1)
					return &testpb.SimpleResponse{Username: fmt.Sprintf("charge-%d", n)}, nil
				}
				addr := serve(t, newEngine(t, newStore(t)), svc, nil)
				key := idemclient.NewKey()
				helper := startHelper(t, addr, key)
				select {
				case <-started:
				case <-time.After(30 * time.Second):
					t.Fatal("the helper's call never reached the handler")
				}
				if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				_ = helper.Wait()
				if tc.honourCancel {
					<-stopped // the server saw the client go
				} else {
					time.AfterFunc(200*time.Millisecond, func() { close(finish) })
				}

				unary, err := idemgrpc.UnaryClientInterceptor()
				if err != nil {
					t.Fatal(err)
				}
				c := testpb.NewTestServiceClient(dial(t, addr, grpc.WithChainUnaryInterceptor(unary)))
				var r idemgrpc.Result
				ctx, cancel := context.WithTimeout(withKey(t.Context(), key), 20*time.Second)
				defer cancel()
				resp, hdr, _, err := call(ctx, c, request("charge"), idemgrpc.Report(&r))
				if err != nil || resp.GetUsername() != "charge-1" {
					t.Fatalf("the new client: %v %v (result %+v)", resp, err, r)
				}
				if want := !tc.honourCancel; replayed(hdr) != want {
					t.Errorf("replayed=%v, want %v (result %+v)", replayed(hdr), want, r)
				}
				if n := charges.Load(); n != 1 {
					t.Errorf("charged %d times, want 1", n)
				}
				t.Logf("the new client: %+v", r)
			})
		}
	})
}
