package redisstore

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestEvictionPolicy checks New against the eviction settings of a
// private server: it refuses a server that may evict records, warns once
// about one that would as soon as maxmemory is set, and accepts
// noeviction in silence.
func TestEvictionPolicy(t *testing.T) {
	srv := startServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	for _, tc := range []struct {
		policy, maxmemory string
		refused           bool
		warning           string // in the one warning logged, "" for none
	}{
		{"noeviction", "0", false, ""},
		{"noeviction", "64mb", false, ""},
		{"allkeys-lru", "64mb", true, ""},
		{"allkeys-random", "64mb", true, ""},
		{"volatile-lru", "64mb", true, ""},
		{"volatile-ttl", "64mb", true, ""},
		{"allkeys-lfu", "0", false, "maxmemory-policy allkeys-lfu"},
		{"volatile-lru", "0", false, "maxmemory-policy volatile-lru"},
	} {
		t.Run(tc.policy+"/"+tc.maxmemory, func(t *testing.T) {
			if err := client.ConfigSet(t.Context(), "maxmemory-policy", tc.policy).Err(); err != nil {
				t.Fatal(err)
			}
			if err := client.ConfigSet(t.Context(), "maxmemory", tc.maxmemory).Err(); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			s, err := New(client, WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
			if tc.refused {
				if !errors.Is(err, ErrEvictionPolicy) || !strings.Contains(err.Error(), tc.policy) || !strings.Contains(err.Error(), srv.addr()) {
					t.Fatalf("New = %v, want ErrEvictionPolicy naming %s and the server", err, tc.policy)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("New = %v", err)
			}
			_ = s.Close()
			lines := strings.Count(log.String(), "\n")
			switch {
			case tc.warning == "" && lines != 0:
				t.Fatalf("unexpected warning: %s", log.String())
			case tc.warning != "" && (lines != 1 || !strings.Contains(log.String(), tc.warning) || !strings.Contains(log.String(), "level=WARN")):
				t.Fatalf("want one warning mentioning %q, got %q", tc.warning, log.String())
			}
		})
	}
	if err := client.ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestEvictionPolicyUnknown is New on a server that refuses CONFIG, as
// managed services do, and on one that is not there: one warning, and
// the Store works.
func TestEvictionPolicyUnknown(t *testing.T) {
	srv := startServer(t, "--rename-command", "CONFIG", "")
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	for name, c := range map[string]*redis.Client{"no CONFIG": client, "no server": offlineClient(t)} {
		var log bytes.Buffer
		s, err := New(c, WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
		if err != nil {
			t.Fatalf("%s: New = %v", name, err)
		}
		_ = s.Close()
		if strings.Count(log.String(), "\n") != 1 || !strings.Contains(log.String(), "could not check") {
			t.Fatalf("%s: want one warning, got %q", name, log.String())
		}
		t.Logf("%s: %s", name, log.String())
	}
}
