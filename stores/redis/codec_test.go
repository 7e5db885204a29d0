package redisstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/redis/go-redis/v9"
)

// These tests need no server.

// quiet drops New's warning that it could not check the eviction policy
// of a server that is not there.
var quiet = WithLogger(slog.New(slog.DiscardHandler))

// offlineClient returns a client of a server that is not there, which
// fails at once: one dial, no retries.
func offlineClient(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
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
		{10 * 365 * 24 * time.Hour, 10 * 365 * 24 * 3600 * 1000},
		{math.MaxInt64 - 1, maxTTLMillis},
		{math.MaxInt64, maxTTLMillis},
		{math.MinInt64, 1},
	} {
		if got := ttlMillis(now, now.Add(tc.d)); got != tc.want {
			t.Errorf("ttlMillis(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	// Times further apart than the longest Duration saturate too, instead
	// of overflowing into a TTL of 1ms.
	for _, tc := range [][2]time.Time{
		{time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)},
		{time.Time{}, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)},
		{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(1<<62, 0)},
	} {
		if got := ttlMillis(tc[0], tc[1]); got != maxTTLMillis {
			t.Errorf("ttlMillis(%v, %v) = %d, want %d", tc[0], tc[1], got, maxTTLMillis)
		}
	}
	// The longest TTL converts back to a Duration, as go-redis does.
	if d := time.Duration(maxTTLMillis) * time.Millisecond; d <= 0 || d/time.Millisecond != time.Duration(maxTTLMillis) {
		t.Errorf("maxTTLMillis overflows a Duration: %v", d)
	}
}

func TestTimeEncodingOrder(t *testing.T) {
	times := []time.Time{
		time.Unix(0, -1<<62), time.Unix(-1, 0), time.Unix(0, -1), time.Unix(0, 0), time.Unix(0, 1),
		time.Date(2026, 1, 1, 0, 0, 0, 123456789, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 123456790, time.UTC),
		time.Unix(0, 1<<62),
	}
	times = append([]time.Time{minTime}, append(times, maxTime)...)
	for i, a := range times {
		ea, err := formatTime(a)
		if err != nil || len(ea) != timeLen {
			t.Fatalf("formatTime(%v) = %q, %v", a, ea, err)
		}
		if back, err := parseTime(ea); err != nil || !back.Equal(a) {
			t.Errorf("parseTime(formatTime(%v)) = %v, %v", a, back, err)
		}
		for _, b := range times[i+1:] {
			if eb, _ := formatTime(b); !(ea < eb) {
				t.Errorf("formatTime(%v) = %q is not below formatTime(%v) = %q", a, ea, b, eb)
			}
		}
	}
}

// Times whose Unix nanoseconds do not fit an int64 are refused, not
// wrapped around to another time.
func TestTimeRange(t *testing.T) {
	for _, tm := range []time.Time{
		{}, minTime.Add(-time.Nanosecond), maxTime.Add(time.Nanosecond),
		time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		if s, err := formatTime(tm); !errors.Is(err, errTimeRange) {
			t.Errorf("formatTime(%v) = %q, %v; want errTimeRange", tm, s, err)
		}
	}
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []idem.Claim{
		{Token: "t", Now: now, LeaseEnd: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Token: "t", Now: time.Time{}, LeaseEnd: now},
	} {
		if _, err := newClaimRecord(&c); !errors.Is(err, errTimeRange) {
			t.Errorf("newClaimRecord(%v, %v) = %v, want errTimeRange", c.Now, c.LeaseEnd, err)
		}
	}
	// The store refuses such times before it touches Redis.
	s, err := New(offlineClient(t), quiet)
	if err != nil {
		t.Fatal(err)
	}
	far := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.Claim(t.Context(), idem.Claim{Scope: "s", Key: "k", Token: "t", Now: now, LeaseEnd: far}); !errors.Is(err, errTimeRange) {
		t.Errorf("Claim = %v", err)
	}
	if err := s.Complete(t.Context(), "s", "k", "t", idem.Response{Status: 200}, now, far); !errors.Is(err, errTimeRange) {
		t.Errorf("Complete = %v", err)
	}
	if err := s.Extend(t.Context(), "s", "k", "t", now, far); !errors.Is(err, errTimeRange) {
		t.Errorf("Extend = %v", err)
	}
}

// encodeRecord is the Go twin of what the Store writes: newClaimRecord for
// an in-progress record (with the lease end and expiry stored apart, as
// after an Extend they could be), and for a completed one what the
// complete script builds.
func encodeRecord(t *testing.T, rec idem.Record, token string) string {
	t.Helper()
	var b []byte
	var err error
	times := []time.Time{rec.ExpiresAt, rec.CreatedAt}
	if rec.State == idem.StateInProgress {
		b = append(b, '1')
		times = append([]time.Time{rec.LeaseEnd}, times...)
	} else {
		b = append(b, '2')
		b = append(b, completedLease...)
	}
	for _, tm := range times {
		if b, err = appendTime(b, tm); err != nil {
			t.Fatal(err)
		}
	}
	b = fmt.Appendf(b, "%05d", len(token))
	b = append(b, token...)
	b = binary.AppendUvarint(b, uint64(len(rec.Fingerprint)))
	b = append(b, rec.Fingerprint...)
	if rec.State == idem.StateCompleted {
		b = append(b, encodeResponseHead(rec.Response)...)
		b = append(b, rec.Response.Body...)
	}
	return string(b)
}

// validRecord checks what decodeRecord promises of every record it
// accepts.
func validRecord(t *testing.T, s string, rec idem.Record) {
	t.Helper()
	switch rec.State {
	case idem.StateInProgress:
		if rec.Response != nil {
			t.Fatalf("decodeRecord(%q): in progress with a response", s)
		}
	case idem.StateCompleted:
		if rec.Response == nil || rec.Response.Status < 200 || rec.Response.Status > 599 {
			t.Fatalf("decodeRecord(%q): completed with response %+v", s, rec.Response)
		}
		if !rec.LeaseEnd.IsZero() {
			t.Fatalf("decodeRecord(%q): completed with a lease end", s)
		}
	default:
		t.Fatalf("decodeRecord(%q): state %d", s, rec.State)
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	now := time.Unix(1_800_000_000, 5)
	c := idem.Claim{Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(time.Minute)}
	inProgress, err := newClaimRecord(&c)
	if err != nil {
		t.Fatal(err)
	}
	completed := func(status int) string {
		return encodeRecord(t, idem.Record{
			Fingerprint: "fp", State: idem.StateCompleted, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
			Response: &idem.Response{Status: status, Body: []byte("b")},
		}, "")
	}
	for _, status := range []int{200, 201, 599} {
		rec, err := decodeRecord(completed(status))
		if err != nil || rec.Response.Status != status {
			t.Errorf("status %d: %+v, %v", status, rec, err)
		}
	}
	if _, err := decodeRecord(inProgress); err != nil {
		t.Fatal(err)
	}
	// A completed record keeps its claim's token.
	withToken := encodeRecord(t, idem.Record{
		Fingerprint: "fp", State: idem.StateCompleted, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
		Response: &idem.Response{Status: 201, Body: []byte("b")},
	}, "token")
	if rec, err := decodeRecord(withToken); err != nil || rec.Fingerprint != "fp" || string(rec.Response.Body) != "b" {
		t.Errorf("completed record with a token: %+v, %v", rec, err)
	}
	for name, s := range map[string]string{
		"state 0":                       "0" + inProgress[1:],
		"state 3":                       "3" + inProgress[1:],
		"status 0":                      completed(0),
		"status 101":                    completed(101),
		"status 199":                    completed(199),
		"status 600":                    completed(600),
		"status 999":                    completed(999),
		"status 1000":                   completed(1000),
		"completed with a lease end":    "2" + inProgress[1:] + string(encodeResponseHead(&idem.Response{Status: 200})),
		"completed, token overruns":     completed(200)[:offTokLen] + "99999" + completed(200)[offToken:],
		"in progress, trailing bytes":   inProgress + "x",
		"unknown flags":                 strings.Replace(completed(200), "\xc8\x01\x04b", "\xc8\x01\x0cb", 1),
		"overlong fingerprint length":   inProgress[:offToken+len(c.Token)] + "\x82\x00fp",
		"in progress, bad lease digits": inProgress[:offLease] + "x" + inProgress[offLease+1:],
	} {
		rec, err := decodeRecord(s)
		if err == nil {
			t.Errorf("%s: decodeRecord(%q) = %+v, want an error", name, s, rec)
		}
		t.Logf("%s: %v", name, err)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	now := time.Unix(1_800_000_000, 5)
	c := idem.Claim{Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(time.Minute)}
	inProgress, err := newClaimRecord(&c)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(inProgress)
	resp := idem.Response{Status: 201, Header: http.Header{"A": {"1"}, "B": {}}, Body: []byte("body")}
	exp, _ := formatTime(now.Add(time.Hour))
	// What the complete script builds from an in-progress record.
	f.Add("2" + completedLease + exp + inProgress[offCreated:] + string(encodeResponseHead(&resp)) + string(resp.Body))
	f.Add("2" + completedLease + exp + inProgress[offCreated:offCreated+timeLen] +
		"00000" + inProgress[offToken+len(c.Token):] + string(encodeResponseHead(&resp)) + string(resp.Body))
	f.Add("2" + completedLease + exp + inProgress[offCreated:offCreated+timeLen] +
		"00000" + inProgress[offToken+len(c.Token):] + string(encodeResponseHead(&idem.Response{Status: 204, BodyOmitted: true})))
	f.Add("2" + completedLease + exp + inProgress[offCreated:offCreated+timeLen] +
		"00000" + inProgress[offToken+len(c.Token):] + string(encodeResponseHead(&idem.Response{Status: 700})))
	f.Add("3" + inProgress[1:])
	f.Fuzz(func(t *testing.T, s string) {
		rec, err := decodeRecord(s)
		if err != nil {
			return
		}
		validRecord(t, s, rec)
		// Only the Store's own encoding is accepted: the record encodes back
		// to the input, byte for byte but for the order of header names,
		// which idem.ParseHeader reads in any order.
		n, err := strconv.Atoi(s[offTokLen:offToken])
		if err != nil {
			t.Fatalf("decodeRecord(%q) accepted token length %q", s, s[offTokLen:offToken])
		}
		again := encodeRecord(t, rec, s[offToken:offToken+n])
		if len(again) != len(s) {
			t.Fatalf("decodeRecord accepted %q, which encodes as %q", s, again)
		}
		if back, err := decodeRecord(again); err != nil || !reflect.DeepEqual(back, rec) {
			t.Fatalf("decodeRecord accepted %q as %+v, which re-encodes to %+v, %v", s, rec, back, err)
		}
	})
}
