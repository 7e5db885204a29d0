package idemfiber_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	redisstore "github.com/idemkit/idem/stores/redis"
	"github.com/redis/go-redis/v9"
)

// TestConformanceRedis runs the HTTP suite through Fiber on the Redis
// server at IDEM_TEST_REDIS_URL (default redis://127.0.0.1:6379/0), each
// scenario under its own key prefix. It skips when the server is
// unreachable, and fails instead when CI is set.
//
// As stores/redis's TestHTTP does, the store is given without its
// store.Clock: the suite moves a manual clock, which the engine's
// alignment with a store's clock would take back.
func TestConformanceRedis(t *testing.T) {
	client := redisClient(t)
	conformance.RunHTTP(t, fiberHarness(func(t *testing.T) idem.Store {
		var b [6]byte
		_, _ = rand.Read(b[:])
		prefix := "idemtest:fiber:" + hex.EncodeToString(b[:]) + ":"
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
				client.Del(ctx, iter.Val())
			}
			if err := iter.Err(); err != nil {
				t.Errorf("cleaning up %s*: %v", prefix, err)
			}
		})
		return clockless{s, s, s, s, s, s, s}
	}))
}

// clockless is a Store with every capability but store.Clock.
type clockless struct {
	store.Store
	store.Getter
	store.Deleter
	store.Extender
	store.Evicter
	store.Notifier
	store.FailoverBound
}

func redisClient(t *testing.T) *redis.Client {
	url := os.Getenv("IDEM_TEST_REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
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
		if os.Getenv("CI") != "" {
			t.Fatalf("Redis at %s (IDEM_TEST_REDIS_URL) is unreachable: %v (CI is set, so this fails instead of skipping)", url, err)
		}
		t.Skipf("Redis at %s (IDEM_TEST_REDIS_URL) is unreachable: %v; skipping (set CI=1 to make this a failure)", url, err)
	}
	return client
}
