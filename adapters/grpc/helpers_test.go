package idemgrpc_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idemgrpc "github.com/idemkit/idem/adapters/grpc"
	idem "github.com/idemkit/idem/core"
	memstore "github.com/idemkit/idem/stores/memory"
	pgxstore "github.com/idemkit/idem/stores/pgx"
	redisstore "github.com/idemkit/idem/stores/redis"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

const (
	defaultRedisURL    = "redis://127.0.0.1:6379/0"
	defaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	unaryCall          = "/grpc.testing.TestService/UnaryCall"
	emptyCall          = "/grpc.testing.TestService/EmptyCall"
)

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

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func randomName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// A storeKind makes a fresh, private store for one test.
type storeKind struct {
	name string
	new  func(t testing.TB) idem.Store
}

var storeKinds = []storeKind{
	{"memory", newMemoryStore},
	{"redis", newRedisStore},
	{"postgres", newPostgresStore},
}

func newMemoryStore(t testing.TB) idem.Store {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	return s
}

// newRedisStore returns a store at IDEM_TEST_REDIS_URL under a random
// prefix whose keys are deleted when the test ends.
func newRedisStore(t testing.TB) idem.Store {
	t.Helper()
	url := envOr("IDEM_TEST_REDIS_URL", defaultRedisURL)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("IDEM_TEST_REDIS_URL=%q: %v", url, err)
	}
	opt.ContextTimeoutEnabled = true
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		unavailable(t, "Redis at %s (IDEM_TEST_REDIS_URL) is unreachable: %v", url, err)
	}
	prefix := "idemgrpc-test:" + randomName() + ":"
	s, err := redisstore.New(client, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := client.Scan(ctx, 0, prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			if err := client.Del(ctx, iter.Val()).Err(); err != nil {
				t.Errorf("deleting %s: %v", iter.Val(), err)
			}
		}
		if err := iter.Err(); err != nil {
			t.Errorf("cleaning up %s*: %v", prefix, err)
		}
	})
	return s
}

func newPostgresStore(t testing.TB) idem.Store {
	t.Helper()
	s, _ := newPostgres(t)
	return s
}

// newPostgres returns a store at IDEM_TEST_POSTGRES_URL in a random table
// that is dropped when the test ends, and its pool.
func newPostgres(t testing.TB) (*pgxstore.Store, *pgxpool.Pool) {
	t.Helper()
	url := envOr("IDEM_TEST_POSTGRES_URL", defaultPostgresURL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("IDEM_TEST_POSTGRES_URL=%q: %v", url, err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		unavailable(t, "PostgreSQL at %s (IDEM_TEST_POSTGRES_URL) is unreachable: %v", url, err)
	}
	table := "idemgrpc_test_" + randomName()
	s, err := pgxstore.New(pool, pgxstore.WithTable(table), pgxstore.WithLogger(nil))
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	if err := s.CreateSchema(ctx); err != nil {
		pool.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()); err != nil {
			t.Errorf("dropping %s: %v", table, err)
		}
		pool.Close()
	})
	return s, pool
}

// newEngine returns an engine on store with a short in-flight hint and
// no logs.
func newEngine(t testing.TB, store idem.Store, opts ...idem.Option) *idem.Engine {
	t.Helper()
	e, err := idem.New(store, append([]idem.Option{
		idem.WithRetryAfter(50 * time.Millisecond),
		idem.WithLogger(slog.New(slog.DiscardHandler)),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// service is grpc.testing.TestService with UnaryCall run by fn, counting
// the calls that reach it.
type service struct {
	testpb.UnimplementedTestServiceServer
	runs atomic.Int64
	fn   func(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error)
}

func (s *service) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	n := s.runs.Add(1)
	if s.fn == nil {
		return &testpb.SimpleResponse{Username: fmt.Sprintf("run-%d", n)}, nil
	}
	return s.fn(ctx, req)
}

func (s *service) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	s.runs.Add(1)
	return &testpb.Empty{}, nil
}

// recovery is the recovery interceptor that sits outside idem's: a panic
// becomes Internal.
func recovery(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return handler(ctx, req)
}

// serve serves svc behind recovery and the idem interceptor on a
// loopback TCP port, with register adding other services, and returns
// the address.
func serve(t testing.TB, engine *idem.Engine, svc *service, opts []idemgrpc.Option, register ...func(*grpc.Server)) string {
	t.Helper()
	unary, err := idemgrpc.UnaryServerInterceptor(engine, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, unary))
	testpb.RegisterTestServiceServer(srv, svc)
	for _, r := range register {
		r(srv)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	t.Cleanup(func() { srv.Stop(); wg.Wait() })
	return lis.Addr().String()
}

// dial returns a connection to addr, closed when the test ends.
func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// errorInfo returns the reason of err's ErrorInfo from idem, or "".
func errorInfo(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == idemgrpc.ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// retryDelay returns the delay of err's RetryInfo, and whether it has one.
func retryDelay(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// newTinyMemoryStore is a memory store whose byte budget keeps no body
// larger than maxBytes.
func newTinyMemoryStore(maxBytes int64) idem.Store {
	return memstore.New(memstore.WithMaxBytes(maxBytes), memstore.WithSweepInterval(0))
}
