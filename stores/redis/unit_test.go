package redisstore

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/redis/go-redis/v9"
)

// These tests need no server.

func TestNew(t *testing.T) {
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer plain.Close()
	if _, err := New(plain); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Errorf("a client that ignores context deadlines: %v", err)
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	if _, err := New(cluster); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("a cluster client that ignores context deadlines: %v", err)
	}

	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer client.Close()

	s, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Key("scope", "key"), DefaultPrefix+"{") || s.Channel() != DefaultPrefix+"notify" {
		t.Errorf("default prefix: key %q, channel %q", s.Key("scope", "key"), s.Channel())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"EmptyPrefix", []Option{WithPrefix("")}, "must not be empty"},
		{"OpenBrace", []Option{WithPrefix("app{1:")}, "'{' or '}'"},
		{"CloseBrace", []Option{WithPrefix("app}:")}, "'{' or '}'"},
		{"LongPrefix", []Option{WithPrefix(strings.Repeat("p", 257))}, "more than 256"},
		{"NilOption", []Option{nil}, "nil Option"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(client, tc.opts...)
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want ErrInvalidOption mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	s, err = New(client, WithPrefix("orders:"))
	if err != nil {
		t.Fatal(err)
	}
	if k := s.Key("scope", "key"); !strings.HasPrefix(k, "orders:{") {
		t.Errorf("key %q does not start with the prefix", k)
	}
}

func TestRecordKey(t *testing.T) {
	k1, id1 := recordKey("p:", "a", "bc")
	k2, id2 := recordKey("p:", "ab", "c")
	if k1 == k2 || id1 == id2 {
		t.Fatalf("(a, bc) and (ab, c) share a key: %q", k1)
	}
	if k1 != "p:{"+id1+"}" || len(id1) != 32 {
		t.Fatalf("key %q, id %q", k1, id1)
	}
	long := strings.Repeat("s", 1000)
	if k, id := recordKey("p:", long, "k"); k != "p:{"+id+"}" {
		t.Fatalf("long scope: key %q", k)
	}
}

func TestTTLMillis(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{time.Minute, 60000},
		{time.Millisecond + time.Nanosecond, 2},
		{time.Nanosecond, 1},
		{0, 1},
		{-time.Hour, 1},
	} {
		if got := ttlMillis(now, now.Add(tc.d)); got != tc.want {
			t.Errorf("ttlMillis(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestHeaderCodec(t *testing.T) {
	for _, h := range []http.Header{
		{},
		{"A": {}},
		{"Content-Type": {"text/plain"}, "X-Multi": {"3", "1", "", "1"}, "X-Bin": {"\x00\xff", "caf\xe9"}},
		{strings.Repeat("N", 300): {strings.Repeat("v", 70000)}},
	} {
		got, err := decodeHeader(string(encodeHeader(h)))
		if err != nil || !reflect.DeepEqual(got, h) {
			t.Errorf("round trip of %q = %q, %v", h, got, err)
		}
	}
	enc := string(encodeHeader(http.Header{"Content-Type": {"text/plain"}, "X": {"a", "b"}}))
	for i := range len(enc) {
		if _, err := decodeHeader(enc[:i]); err == nil {
			t.Errorf("decodeHeader of the first %d of %d bytes succeeded", i, len(enc))
		}
	}
	if _, err := decodeHeader(enc + "x"); err == nil {
		t.Error("decodeHeader with trailing bytes succeeded")
	}
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add(string(encodeHeader(http.Header{"A": {"1", "2"}, "B": {}})))
	f.Add("\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := decodeHeader(s)
		if err != nil {
			return
		}
		if again := string(encodeHeader(h)); again != s {
			// Same content in another order is fine; it must decode the same.
			h2, err := decodeHeader(again)
			if err != nil || !reflect.DeepEqual(h, h2) {
				t.Fatalf("re-encoding %q gave %q", s, again)
			}
		}
	})
}

func TestTimeEncodingOrder(t *testing.T) {
	times := []time.Time{
		time.Unix(0, -1<<62), time.Unix(-1, 0), time.Unix(0, -1), time.Unix(0, 0), time.Unix(0, 1),
		time.Date(2026, 1, 1, 0, 0, 0, 123456789, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 123456790, time.UTC),
		time.Unix(0, 1<<62),
	}
	for i, a := range times {
		ea := formatTime(a)
		if len(ea) != timeLen {
			t.Fatalf("formatTime(%v) = %q", a, ea)
		}
		if back, err := parseTime(ea); err != nil || !back.Equal(a) {
			t.Errorf("parseTime(formatTime(%v)) = %v, %v", a, back, err)
		}
		for _, b := range times[i+1:] {
			if eb := formatTime(b); !(ea < eb) {
				t.Errorf("formatTime(%v) = %q is not below formatTime(%v) = %q", a, ea, b, eb)
			}
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	now := time.Unix(1_800_000_000, 5)
	c := idem.Claim{Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(time.Minute)}
	inProgress := newClaimRecord(&c)
	f.Add(inProgress)
	resp := idem.Response{Status: 201, Header: http.Header{"A": {"1"}}, Body: []byte("body")}
	// What the complete script builds from an in-progress record.
	f.Add("2" + strings.Repeat("0", 20) + formatTime(now.Add(time.Hour)) + inProgress[offCreated:offCreated+timeLen] +
		"00000" + inProgress[offToken+len(c.Token):] + string(encodeResponseHead(&resp)) + string(resp.Body))
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = decodeRecord(s) // must not panic
	})
}
