package redisstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

// TestMemoryPerRecord measures the server memory a record costs on a
// private Redis: a completed record holding a 1 KiB JSON response with
// typical headers, and an in-progress claim, as the engine writes them
// (hex SHA-256 fingerprint, 32-digit token, a UUID key, a tenant's
// scope). It logs MEMORY USAGE of a sample of keys and the growth of
// INFO's used_memory over all of them, per record, and only checks a sane
// bound: the figures depend on the Redis version and allocator.
func TestMemoryPerRecord(t *testing.T) {
	srv := startServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s := newTestStore(t, client)
	ctx := t.Context()
	const n = 10000
	body := []byte(`{"id":"ord_` + strings.Repeat("0", 20) + `","items":[`)
	for len(body) < 1024-2 {
		body = append(body, `{"sku":"BOOK-123","qty":1,"price":"12.50"},`...)
	}
	body = append(body[:1022], "]}"...)
	header := http.Header{
		"Content-Type": {"application/json"},
		"Location":     {"/orders/ord_00000000000000000000"},
		"X-Request-Id": {"6f1c2a9e-4b7d-4e51-9a3c-2d8e0f7b1a64"},
		"Etag":         {`"33a64df551425fcc55e4d42a148795d9f25f89d4"`},
	}
	resp := store.Result{Head: httpHead(http.StatusCreated, header), Body: body}
	scope := idem.Scope("tenant-42", http.MethodPost, "/orders")
	fp := idem.Fingerprint(http.MethodPost, "/orders", body)

	used := func() int64 {
		t.Helper()
		info, err := client.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatal("no used_memory in INFO memory")
		return 0
	}
	measure := func(name string, write func(key string)) (sample, delta float64) {
		t.Helper()
		before := used()
		keys := make([]string, n)
		for i := range keys {
			keys[i] = uuid()
			write(keys[i])
		}
		grown := used() - before
		var total int64
		const samples = 200
		for _, key := range keys[:samples] {
			m, err := client.MemoryUsage(ctx, s.Key(scope, key), 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			total += m
		}
		sample, delta = float64(total)/samples, float64(grown)/n
		t.Logf("%s: MEMORY USAGE %.0f bytes (mean of %d keys); used_memory grew %.0f bytes per record over %d", name, sample, samples, delta, n)
		return sample, delta
	}

	now := time.Now()
	claim := func(key string) string {
		token := hex.EncodeToString(random(16))
		res, err := s.Claim(ctx, store.Claim{Scope: scope, Key: key, Fingerprint: fp, Token: token, Now: now, LeaseEnd: now.Add(time.Hour)})
		if err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		return token
	}
	sample, delta := measure("completed, 1 KiB body", func(key string) {
		if err := s.Complete(ctx, holdOf(scope, key, claim(key)), completion(resp, now, now.Add(24*time.Hour))); err != nil {
			t.Fatal(err)
		}
	})
	value := recordLen(t, client, s)
	t.Logf("a completed record's value: %d bytes for a %d-byte body and %d bytes of headers", value, len(body), headerLen(header))
	t.Logf("ratios: MEMORY USAGE / body %.2f, used_memory growth / body %.2f, MEMORY USAGE / value %.2f",
		sample/float64(len(body)), delta/float64(len(body)), sample/float64(value))
	if sample > 4096 || delta > 4096 {
		t.Errorf("a completed record with a 1 KiB body costs %.0f (MEMORY USAGE) or %.0f (used_memory) bytes, over 4 KiB", sample, delta)
	}
	sample, delta = measure("in-progress claim", func(key string) { claim(key) })
	if sample > 1024 || delta > 1024 {
		t.Errorf("a claim costs %.0f (MEMORY USAGE) or %.0f (used_memory) bytes, over 1 KiB", sample, delta)
	}
}

// recordLen returns the length of one completed record's value.
func recordLen(t *testing.T, client *redis.Client, s *Store) int {
	t.Helper()
	iter := client.Scan(context.Background(), 0, s.prefix+"{*", 100).Iterator()
	for iter.Next(context.Background()) {
		v, err := client.Get(context.Background(), iter.Val()).Result()
		if err == nil && v[0] == '2' {
			return len(v)
		}
	}
	t.Fatal("no completed record")
	return 0
}

func headerLen(h http.Header) int {
	var b bytes.Buffer
	_ = h.Write(&b)
	return b.Len()
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// uuid returns a random version 4 UUID, as clients send for keys.
func uuid() string {
	b := random(16)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[:4], b[4:6], b[6:8], b[8:10], b[10:])
}
