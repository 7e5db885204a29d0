package idem

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/idemkit/idem/core/store"
)

// decodeResult is decodeInto into a new Response.
func decodeResult(res store.Result) (*Response, error) {
	resp := new(Response)
	return resp, decodeInto(resp, res)
}

func TestResultRoundTrip(t *testing.T) {
	for _, resp := range []*Response{
		{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)},
		{Status: 200},
		{Status: 599, Header: http.Header{"X": {"a", "b"}}, BodyOmitted: true},
		{kind: kindValue, Body: []byte("v")},
		{kind: kindFinal, Body: []byte("card declined")},
		{kind: kindValue, Header: http.Header{HeaderSealed: {"k1"}}, Body: []byte("sealed")},
	} {
		res := encodeResult(resp)
		got, err := decodeResult(res)
		if err != nil || got.Status != resp.Status || got.kind != resp.kind || string(got.Body) != string(resp.Body) ||
			got.BodyOmitted != resp.BodyOmitted || len(got.Header) != len(resp.Header) {
			t.Errorf("round trip of %+v = %+v, %v", resp, got, err)
		}
	}
	// Headers that do not fit store.MaxHead: the status alone, no body.
	big := &Response{Status: 201, Header: http.Header{"X-Big": {strings.Repeat("v", store.MaxHead)}}, Body: []byte("b")}
	res := encodeResult(big)
	if got, err := decodeResult(res); err != nil || len(res.Head) > store.MaxHead || got.Status != 201 || len(got.Header) != 0 || !got.BodyOmitted {
		t.Errorf("oversized head: %d bytes, decoded %+v, %v", len(res.Head), got, err)
	}
	// What a store wrote before results were opaque reads as before.
	legacy := store.Result{Head: store.LegacyHead(202, AppendHeader(nil, http.Header{"A": {"1"}})), Body: []byte("x")}
	if got, err := decodeResult(legacy); err != nil || got.Status != 202 || got.Header.Get("A") != "1" || string(got.Body) != "x" {
		t.Errorf("legacy head: %+v, %v", got, err)
	}
	if got, err := decodeResult(store.Result{Head: store.LegacyHead(200, nil)}); err != nil || got.Status != 200 || len(got.Header) != 0 {
		t.Errorf("legacy head without headers: %+v, %v", got, err)
	}
}

func TestResultCorrupt(t *testing.T) {
	for name, head := range map[string][]byte{
		"empty":       nil,
		"unknown":     {9},
		"status 0":    {headHTTP, 0, 1, 0},
		"status 199":  store.LegacyHead(199, nil),
		"status 600":  store.LegacyHead(600, nil),
		"a 101":       store.LegacyHead(101, nil),
		"no headers":  {headHTTP, 200, 1},
		"bad headers": {headHTTP, 0xc8, 1, 2, 0},
		"value, junk": {headValue, 7},
	} {
		if got, err := decodeResult(store.Result{Head: head}); !errors.Is(err, ErrCorruptRecord) {
			t.Errorf("%s: decodeResult(%v) = %+v, %v; want ErrCorruptRecord", name, head, got, err)
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

// TestEncodeResultOneAllocation: an HTTP result's head is built in one
// allocation, sized before it is written, and reads back as it was.
func TestEncodeResultOneAllocation(t *testing.T) {
	resp := &Response{Status: 201, Header: http.Header{
		"Content-Type": {"application/json"},
		"Location":     {"/orders/123"},
		"Vary":         {"Accept", "Accept-Encoding"},
	}, Body: []byte(`{"id":123}`)}
	var res store.Result
	if n := testing.AllocsPerRun(100, func() { res = encodeResult(resp) }); n != 1 {
		t.Errorf("encodeResult made %v allocations, want 1", n)
	}
	var back Response
	if err := decodeInto(&back, res); err != nil || back.Status != 201 || !reflect.DeepEqual(back.Header, resp.Header) || string(back.Body) != `{"id":123}` {
		t.Errorf("read back %+v, %v", back, err)
	}
}
