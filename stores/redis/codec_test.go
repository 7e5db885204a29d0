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

	"github.com/idemkit/idem/core/store"
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
	for _, c := range []store.Claim{
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
	if _, err := s.Claim(t.Context(), store.Claim{Scope: "s", Key: "k", Token: "t", Now: now, LeaseEnd: far}); !errors.Is(err, errTimeRange) {
		t.Errorf("Claim = %v", err)
	}
	if err := s.Complete(t.Context(), holdOf("s", "k", "t"), completion(store.Result{Head: []byte{1}}, now, far)); !errors.Is(err, errTimeRange) {
		t.Errorf("Complete = %v", err)
	}
	if err := s.Extend(t.Context(), holdOf("s", "k", "t"), now, far); !errors.Is(err, errTimeRange) {
		t.Errorf("Extend = %v", err)
	}
}

// recordPrefix encodes what every record starts with, up to and with its
// fingerprint: for an in-progress record what newClaimRecord writes (with
// the lease end and expiry stored apart, as after an Extend they could
// be), for a completed one what the complete script copies.
func recordPrefix(t testing.TB, rec store.Record, token string) []byte {
	t.Helper()
	var b []byte
	var err error
	times := []time.Time{rec.ExpiresAt, rec.CreatedAt}
	if rec.State == store.InProgress {
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
	return append(b, rec.Fingerprint...)
}

// encodeRecord is the Go twin of what the Store writes: recordPrefix,
// then for a completed record the result, as the complete script appends
// it.
func encodeRecord(t testing.TB, rec store.Record, token string) string {
	t.Helper()
	b := recordPrefix(t, rec, token)
	if rec.State == store.Completed {
		b = append(b, encodeResultHead(&rec.Result)...)
		b = append(b, rec.Result.Body...)
	}
	return string(b)
}

// legacyResponse is the response a record completed before results were
// opaque kept.
type legacyResponse struct {
	Status      int
	Header      []byte // header bytes (headerBytes); nil: flagHeader unset
	Body        []byte // nil: flagBody unset
	BodyOmitted bool
}

// encodeLegacyRecord is the encoder of earlier releases, for a completed
// record: recordPrefix, then the uvarint status, the flags, the header
// bytes' length and bytes, and the body.
func encodeLegacyRecord(t testing.TB, rec store.Record, token string, resp legacyResponse) string {
	t.Helper()
	rec.State = store.Completed
	b := recordPrefix(t, rec, token)
	b = binary.AppendUvarint(b, uint64(resp.Status))
	var flags byte
	if resp.BodyOmitted {
		flags |= flagOmitted
	}
	if resp.Header != nil {
		flags |= flagHeader
	}
	if resp.Body != nil {
		flags |= flagBody
	}
	b = append(b, flags)
	if resp.Header != nil {
		b = binary.AppendUvarint(b, uint64(len(resp.Header)))
		b = append(b, resp.Header...)
	}
	return string(append(b, resp.Body...))
}

// validRecord checks what decodeRecord promises of every record it
// accepts.
func validRecord(t *testing.T, s string, rec store.Record) {
	t.Helper()
	switch rec.State {
	case store.InProgress:
		if !reflect.DeepEqual(rec.Result, store.Result{}) {
			t.Fatalf("decodeRecord(%q): in progress with a result", s)
		}
	case store.Completed:
		if len(rec.Result.Head) == 0 {
			t.Fatalf("decodeRecord(%q): completed without a head", s)
		}
		if !rec.LeaseEnd.IsZero() {
			t.Fatalf("decodeRecord(%q): completed with a lease end", s)
		}
	default:
		t.Fatalf("decodeRecord(%q): state %d", s, rec.State)
	}
}

func TestDecodeRecord(t *testing.T) {
	now := time.Unix(1_800_000_000, 5)
	c := store.Claim{Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(time.Minute)}
	inProgress, err := newClaimRecord(&c)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := decodeRecord(inProgress); err != nil || rec.State != store.InProgress || rec.Fingerprint != "fp" ||
		!rec.LeaseEnd.Equal(c.LeaseEnd) || !rec.ExpiresAt.Equal(c.LeaseEnd) || !rec.CreatedAt.Equal(now) {
		t.Fatalf("in progress: %+v, %v", rec, err)
	}
	base := store.Record{Fingerprint: "fp", State: store.Completed, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	// Results come back byte for byte, whatever their bytes, with or
	// without the claim's token (records completed before tokens were
	// kept hold none).
	for name, res := range map[string]store.Result{
		"http":         {Head: httpHead(201, http.Header{"A": {"1", ""}}), Body: []byte("body")},
		"binary":       {Head: []byte{0, 0xff, 1, 2, 0x80}, Body: []byte{0, 0xc8, 0x01, 0xff}},
		"no body":      {Head: []byte{7}},
		"omitted":      {Head: []byte("head"), BodyOmitted: true},
		"largest head": {Head: []byte(strings.Repeat("h", store.MaxHead)), Body: []byte("b")},
	} {
		for _, token := range []string{"", "token"} {
			want := base
			want.Result = res
			got, err := decodeRecord(encodeRecord(t, want, token))
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s, token %q: %+v, %v; want %+v", name, token, got, err, want)
			}
		}
	}
	// Legacy records read with store.LegacyHead; the statuses and header
	// bytes are the engine's to check.
	hdr := headerBytes(http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "", "b"}})
	for name, tc := range map[string]struct {
		resp legacyResponse
		want store.Result
	}{
		"200, no header, no body": {legacyResponse{Status: 200}, store.Result{Head: store.LegacyHead(200, nil)}},
		"201, headers, body": {legacyResponse{Status: 201, Header: hdr, Body: []byte("{}")},
			store.Result{Head: store.LegacyHead(201, hdr), Body: []byte("{}")}},
		"599, empty body": {legacyResponse{Status: 599, Body: []byte{}}, store.Result{Head: store.LegacyHead(599, nil), Body: []byte{}}},
		"204, omitted": {legacyResponse{Status: 204, Header: []byte{1, 0}, BodyOmitted: true},
			store.Result{Head: store.LegacyHead(204, []byte{1, 0}), BodyOmitted: true}},
		"600": {legacyResponse{Status: 600}, store.Result{Head: store.LegacyHead(600, nil)}},
	} {
		for _, token := range []string{"", "token"} {
			want := base
			want.Result = tc.want
			got, err := decodeRecord(encodeLegacyRecord(t, base, token, tc.resp))
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("legacy %s, token %q: %+v, %v; want %+v", name, token, got, err, want)
			}
		}
	}
}

func TestDecodeRecordRejects(t *testing.T) {
	now := time.Unix(1_800_000_000, 5)
	c := store.Claim{Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(time.Minute)}
	inProgress, err := newClaimRecord(&c)
	if err != nil {
		t.Fatal(err)
	}
	base := store.Record{Fingerprint: "fp", State: store.Completed, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	completed := encodeRecord(t, store.Record{
		Fingerprint: "fp", State: store.Completed, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
		Result: store.Result{Head: []byte("h"), Body: []byte("b")},
	}, "")
	prefix := string(recordPrefix(t, base, ""))
	legacy := func(r legacyResponse) string { return encodeLegacyRecord(t, base, "", r) }
	for name, s := range map[string]string{
		"state 0":                       "0" + inProgress[1:],
		"state 3":                       "3" + inProgress[1:],
		"completed with a lease end":    "2" + inProgress[1:] + string(encodeResultHead(&store.Result{Head: []byte("h")})),
		"completed, token overruns":     completed[:offTokLen] + "99999" + completed[offToken:],
		"completed without a result":    prefix,
		"in progress, trailing bytes":   inProgress + "x",
		"overlong fingerprint length":   inProgress[:offToken+len(c.Token)] + "\x82\x00fp",
		"in progress, bad lease digits": inProgress[:offLease] + "x" + inProgress[offLease+1:],
		"format 0":                      prefix + "\x00\x00\x01h",
		"format 1":                      prefix + "\x01\x00\x01h",
		"format 3":                      prefix + "\x03\x00\x01h",
		"format 0x7f":                   prefix + "\x7f\x00\x01h",
		"no flags":                      prefix + "\x02",
		"unknown flags":                 prefix + "\x02\x02\x01h",
		"no head length":                prefix + "\x02\x00",
		"empty head":                    prefix + "\x02\x00\x00body",
		"head overruns":                 prefix + "\x02\x00\x05head",
		"overlong head length":          prefix + "\x02\x00\x81\x00h",
		// Legacy statuses below 128 would read as a format byte; none was
		// ever written (the engine kept 200 to 599).
		"legacy status 0":              legacy(legacyResponse{Status: 0}),
		"legacy status 101":            legacy(legacyResponse{Status: 101}),
		"legacy, no flags":             prefix + "\xc8\x01",
		"legacy, unknown flags":        prefix + "\xc8\x01\x0cb",
		"legacy, bytes after nil body": legacy(legacyResponse{Status: 200}) + "b",
		"legacy, empty header bytes":   legacy(legacyResponse{Status: 200, Header: []byte{}}),
		"legacy, header overruns":      prefix + "\xc8\x01\x02\x09\x01\x00",
		"legacy, overlong status":      prefix + "\xc8\x81\x00\x00",
		"legacy, status overflows":     prefix + "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x00",
	} {
		rec, err := decodeRecord(s)
		if !errors.Is(err, store.ErrCorruptRecord) {
			t.Errorf("%s: decodeRecord(%q) = %+v, %v; want ErrCorruptRecord", name, s, rec, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

// TestDecodeRecordCut cuts a completed record at every length: a cut
// anywhere before the body (in the header, the token, the fingerprint,
// the result's format byte, flags or head) is refused as corrupt. A cut
// inside the body is not detected, and reads as the shorter body: the
// body has no length of its own (see the layout in codec.go, which says
// why the format keeps it so). An in-progress record, which ends with its
// fingerprint, is refused wherever it is cut.
func TestDecodeRecordCut(t *testing.T) {
	now := time.Unix(1_800_000_000, 5)
	res := store.Result{Head: httpHead(201, http.Header{"Content-Type": {"application/json"}}), Body: []byte(`{"id":1}`)}
	full := encodeRecord(t, store.Record{Fingerprint: "fp", State: store.Completed, CreatedAt: now, ExpiresAt: now.Add(time.Hour), Result: res}, "token")
	bodyAt := len(full) - len(res.Body)
	for n := range len(full) {
		rec, err := decodeRecord(full[:n])
		switch {
		case n < bodyAt && !errors.Is(err, store.ErrCorruptRecord):
			t.Errorf("cut to %d bytes, before the body at %d: %+v, %v; want ErrCorruptRecord", n, bodyAt, rec, err)
		case n >= bodyAt && (err != nil || string(rec.Result.Body) != string(res.Body[:n-bodyAt])):
			t.Errorf("cut to %d bytes, inside the body: body %q, %v; want the body cut to %q", n, rec.Result.Body, err, res.Body[:n-bodyAt])
		}
	}
	if rec, err := decodeRecord(full); err != nil || string(rec.Result.Body) != string(res.Body) {
		t.Fatalf("the whole record: body %q, %v", rec.Result.Body, err)
	}

	c := store.Claim{Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(time.Minute)}
	inProgress, err := newClaimRecord(&c)
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(inProgress) {
		if rec, err := decodeRecord(inProgress[:n]); !errors.Is(err, store.ErrCorruptRecord) {
			t.Errorf("in-progress record cut to %d bytes: %+v, %v; want ErrCorruptRecord", n, rec, err)
		}
	}
}

func FuzzDecodeRecord(f *testing.F) {
	now := time.Unix(1_800_000_000, 5)
	c := store.Claim{Fingerprint: "fp", Token: "token", Now: now, LeaseEnd: now.Add(time.Minute)}
	inProgress, err := newClaimRecord(&c)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(inProgress)
	res := store.Result{Head: httpHead(201, http.Header{"A": {"1"}, "B": {}}), Body: []byte("body")}
	exp, _ := formatTime(now.Add(time.Hour))
	// What the complete script builds from an in-progress record.
	f.Add("2" + completedLease + exp + inProgress[offCreated:] + string(encodeResultHead(&res)) + string(res.Body))
	noToken := "2" + completedLease + exp + inProgress[offCreated:offCreated+timeLen] + "00000" + inProgress[offToken+len(c.Token):]
	f.Add(noToken + string(encodeResultHead(&res)) + string(res.Body))
	f.Add(noToken + string(encodeResultHead(&store.Result{Head: []byte{1}, BodyOmitted: true})))
	// Legacy records.
	base := store.Record{Fingerprint: "fp", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	f.Add(encodeLegacyRecord(f, base, "token", legacyResponse{Status: 201, Header: headerBytes(http.Header{"A": {"1"}}), Body: []byte("body")}))
	f.Add(encodeLegacyRecord(f, base, "", legacyResponse{Status: 204, BodyOmitted: true}))
	f.Add(encodeLegacyRecord(f, base, "", legacyResponse{Status: 700, Header: []byte{1, 0}, Body: []byte{}}))
	f.Add("3" + inProgress[1:])
	f.Fuzz(func(t *testing.T, s string) {
		rec, err := decodeRecord(s)
		if err != nil {
			if !errors.Is(err, store.ErrCorruptRecord) {
				t.Fatalf("decodeRecord(%q) = %v, not ErrCorruptRecord", s, err)
			}
			return
		}
		validRecord(t, s, rec)
		// Only the Store's own encodings are accepted: the record encodes
		// back to the input, byte for byte.
		n, err := strconv.Atoi(s[offTokLen:offToken])
		if err != nil {
			t.Fatalf("decodeRecord(%q) accepted token length %q", s, s[offTokLen:offToken])
		}
		token := s[offToken : offToken+n]
		again := encodeRecord(t, rec, token)
		if rec.State == store.Completed && s[len(recordPrefix(t, rec, token))] >= 0x80 {
			// A legacy record: its Head is LegacyHead(status, header bytes),
			// the header bytes "no headers" when flagHeader was unset, and
			// an empty body may have had flagBody set or not.
			again = legacyAgain(t, rec, token, s)
		}
		if again != s {
			t.Fatalf("decodeRecord accepted %q, which encodes as %q", s, again)
		}
		if back, err := decodeRecord(again); err != nil || !reflect.DeepEqual(back, rec) {
			t.Fatalf("decodeRecord accepted %q as %+v, which re-encodes to %+v, %v", s, rec, back, err)
		}
	})
}

// legacyAgain encodes the legacy record that decodes as rec, and returns
// the one of its encodings that is s, if any.
func legacyAgain(t *testing.T, rec store.Record, token, s string) string {
	head := rec.Result.Head
	if len(head) == 0 || head[0] != 1 {
		t.Fatalf("legacy record %q read with head %q", s, head)
	}
	status, n := binary.Uvarint(head[1:])
	if n <= 0 {
		t.Fatalf("legacy record %q read with head %q", s, head)
	}
	hdr := head[1+n:]
	resp := legacyResponse{Status: int(status), Header: hdr, Body: rec.Result.Body, BodyOmitted: rec.Result.BodyOmitted}
	var tried []string
	for _, noHeader := range []bool{false, true} {
		for _, noBody := range []bool{false, true} {
			r := resp
			if noHeader {
				if string(hdr) != "\x01\x00" {
					continue
				}
				r.Header = nil
			}
			if noBody {
				if len(r.Body) != 0 {
					continue
				}
				r.Body = nil
			} else if r.Body == nil {
				r.Body = []byte{}
			}
			e := encodeLegacyRecord(t, rec, token, r)
			if e == s {
				return e
			}
			tried = append(tried, e)
		}
	}
	return fmt.Sprint(tried)
}
