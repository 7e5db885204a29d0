package redisstore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestNew(t *testing.T) {
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer plain.Close()
	if _, err := New(plain); !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Errorf("a client that ignores context deadlines: %v", err)
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	if _, err := New(cluster); !errors.Is(err, ErrBadOption) {
		t.Errorf("a cluster client that ignores context deadlines: %v", err)
	}

	client := offlineClient(t)

	s, err := New(client, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Key("scope", "key"), DefaultPrefix+"{") || s.Channel() != DefaultPrefix+"notify" {
		t.Errorf("default prefix: key %q, channel %q", s.Key("scope", "key"), s.Channel())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer ring.Close()
	short := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, ReadTimeout: 200 * time.Millisecond})
	defer short.Close()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   []Option
		want   string
	}{
		{"EmptyPrefix", client, []Option{WithPrefix("")}, "must not be empty"},
		{"OpenBrace", client, []Option{WithPrefix("app{1:")}, "'{' or '}'"},
		{"CloseBrace", client, []Option{WithPrefix("app}:")}, "'{' or '}'"},
		{"LongPrefix", client, []Option{WithPrefix(strings.Repeat("p", 257))}, "more than 256"},
		{"NoReplicas", client, []Option{WithReplicas(0, time.Second)}, "want at least 1"},
		{"NegativeReplicas", client, []Option{WithReplicas(-1, time.Second)}, "want at least 1"},
		{"NoWaitTimeout", client, []Option{WithReplicas(1, 0)}, "at least 1ms"},
		{"WaitOverReadTimeout", short, []Option{WithReplicas(1, 200*time.Millisecond)}, "ReadTimeout"},
		{"ReplicasOnRing", ring, []Option{WithReplicas(1, time.Second)}, "*redis.Ring"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.client, append(tc.opts, quiet)...)
			if !errors.Is(err, ErrBadOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want ErrBadOption mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	// Nil options are ignored; the last value of an option wins.
	s, err = New(client, nil, WithPrefix("x:"), nil, WithPrefix("orders:"), WithReplicas(2, 100*time.Millisecond), quiet)
	if err != nil {
		t.Fatal(err)
	}
	if k := s.Key("scope", "key"); !strings.HasPrefix(k, "orders:{") {
		t.Errorf("key %q does not start with the prefix", k)
	}
	if s.replicas != 2 || s.waitTimeout != 100*time.Millisecond {
		t.Errorf("WithReplicas: %d replicas, timeout %v", s.replicas, s.waitTimeout)
	}
}
