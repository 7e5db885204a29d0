package pgxstore

import (
	"errors"
	"net/http"
	"reflect"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []http.Header{
		nil,
		{},
		{"A": {}},
		{"Content-Type": {"application/json"}, "X-Multi": {"1", "2", ""}, "X-Bin": {"\x00\xff\x80"}},
	} {
		got, err := decodeHeader(encodeHeader(h))
		if err != nil || !reflect.DeepEqual(got, h) {
			t.Errorf("round trip of %#v: %#v, %v", h, got, err)
		}
	}
	for _, bad := range [][]byte{{}, {2}, {1}, {1, 1}, {1, 1, 5, 'a'}, {1, 0, 0}, {1, 1, 1, 'a', 1, 9}} {
		if _, err := decodeHeader(bad); !errors.Is(err, errHeaderFormat) {
			t.Errorf("decodeHeader(%q): %v, want errHeaderFormat", bad, err)
		}
	}
}

// FuzzDecodeHeader feeds arbitrary column bytes to the decoder: it never
// panics, and whatever it accepts encodes back to an equal header.
func FuzzDecodeHeader(f *testing.F) {
	f.Add(encodeHeader(http.Header{"A": {"1", "2"}, "B": {}}))
	f.Add([]byte{1, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			return
		}
		again, err := decodeHeader(encodeHeader(h))
		if err != nil || !reflect.DeepEqual(again, h) {
			t.Fatalf("accepted %q as %#v, which re-encodes to %#v, %v", b, h, again, err)
		}
	})
}
