package idem

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRecordTakeable(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name string
		rec  Record
		want bool
	}{
		{"live claim", Record{State: StateInProgress, LeaseEnd: now.Add(time.Second), ExpiresAt: now.Add(time.Second)}, false},
		{"claim whose lease ends now", Record{State: StateInProgress, LeaseEnd: now, ExpiresAt: now.Add(time.Hour)}, true},
		{"claim past its lease", Record{State: StateInProgress, LeaseEnd: now.Add(-time.Nanosecond), ExpiresAt: now.Add(time.Hour)}, true},
		{"completed before expiry", Record{State: StateCompleted, ExpiresAt: now.Add(time.Nanosecond)}, false},
		{"completed, expiring now", Record{State: StateCompleted, ExpiresAt: now}, true},
		{"completed with a stale lease end", Record{State: StateCompleted, LeaseEnd: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)}, false},
	} {
		if got := tc.rec.Takeable(now); got != tc.want {
			t.Errorf("%s: Takeable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRecordCheck(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ok := []Record{
		{State: StateInProgress, LeaseEnd: now, ExpiresAt: now},
		{State: StateCompleted, ExpiresAt: now, Response: &Response{Status: 200}},
		{State: StateCompleted, ExpiresAt: now, Response: &Response{Status: 599, BodyOmitted: true}},
	}
	for _, r := range ok {
		if err := r.Check(); err != nil {
			t.Errorf("Check(%+v) = %v", r, err)
		}
	}
	bad := map[string]Record{
		"state 0":                     {ExpiresAt: now},
		"state 3":                     {State: 3, ExpiresAt: now},
		"no expiry":                   {State: StateCompleted, Response: &Response{Status: 200}},
		"in progress, no lease end":   {State: StateInProgress, ExpiresAt: now},
		"completed without response":  {State: StateCompleted, ExpiresAt: now},
		"completed with status 199":   {State: StateCompleted, ExpiresAt: now, Response: &Response{Status: 199}},
		"completed with status 600":   {State: StateCompleted, ExpiresAt: now, Response: &Response{Status: 600}},
		"completed with a 101 status": {State: StateCompleted, ExpiresAt: now, Response: &Response{Status: 101}},
	}
	for name, r := range bad {
		if err := r.Check(); !errors.Is(err, ErrCorruptRecord) {
			t.Errorf("%s: Check = %v, want ErrCorruptRecord", name, err)
		}
	}
}

func TestHeaderFormat(t *testing.T) {
	for _, h := range []http.Header{
		{},
		{"A": {}},
		{"Content-Type": {"text/plain"}, "X-Multi": {"3", "1", "", "1"}, "X-Bin": {"\x00\xff", "caf\xe9"}},
		{strings.Repeat("N", 300): {strings.Repeat("v", 70000)}},
	} {
		enc := AppendHeader(nil, h)
		for name, got := range map[string]func() (http.Header, error){
			"[]byte": func() (http.Header, error) { return ParseHeader(enc) },
			"string": func() (http.Header, error) { return ParseHeader(string(enc)) },
		} {
			got, err := got()
			if err != nil || !reflect.DeepEqual(got, h) {
				t.Errorf("round trip of %q through a %s = %q, %v", h, name, got, err)
			}
		}
	}
	// Equal headers encode to equal bytes, whatever the map's order.
	a := AppendHeader(nil, http.Header{"B": {"2"}, "A": {"1"}, "C": {}})
	for range 20 {
		if b := AppendHeader(nil, http.Header{"C": {}, "A": {"1"}, "B": {"2"}}); string(a) != string(b) {
			t.Fatalf("one header, two encodings: %q and %q", a, b)
		}
	}
	// Names out of order are read (an earlier store wrote them so); a name
	// twice, an overlong varint, an unknown version are not.
	if h, err := ParseHeader("\x01\x02\x01B\x00\x01A\x00"); err != nil || len(h) != 2 {
		t.Errorf("unsorted names: %q, %v", h, err)
	}
	for _, bad := range []string{
		"",
		"\x02\x00",
		"\x01\x02\x01A\x00\x01A\x00",
		"\x01\x81\x00",
		"\x01\x01\x05a",
		"\x01\x01\x01a\x01\x09",
		"\x01\x00\x00",
	} {
		if h, err := ParseHeader(bad); !errors.Is(err, ErrCorruptRecord) {
			t.Errorf("ParseHeader(%q) = %q, %v; want ErrCorruptRecord", bad, h, err)
		}
	}
	enc := string(AppendHeader(nil, http.Header{"Content-Type": {"text/plain"}, "X": {"a", "b"}}))
	for i := range len(enc) {
		if _, err := ParseHeader(enc[:i]); err == nil {
			t.Errorf("ParseHeader of the first %d of %d bytes succeeded", i, len(enc))
		}
	}
}

// FuzzParseHeader feeds arbitrary bytes to the decoder: it never panics,
// and whatever it accepts encodes back to the same header, and to the
// input itself when the input's names are sorted.
func FuzzParseHeader(f *testing.F) {
	f.Add(string(AppendHeader(nil, http.Header{"A": {"1", "2"}, "B": {}})))
	f.Add("\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")
	f.Add("")
	f.Add("\x01\x02\x01B\x00\x01A\x00")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHeader(s)
		if err != nil {
			if !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("ParseHeader(%q): %v does not wrap ErrCorruptRecord", s, err)
			}
			return
		}
		enc := AppendHeader(nil, h)
		again, err := ParseHeader(enc)
		if err != nil || !reflect.DeepEqual(again, h) {
			t.Fatalf("accepted %q as %q, which re-encodes to %q, %v", s, h, again, err)
		}
		if len(enc) != len(s) {
			t.Fatalf("accepted %q (%d bytes) as %q, which encodes in %d bytes", s, len(s), h, len(enc))
		}
	})
}
