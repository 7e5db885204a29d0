package idem

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"testing"
)

func TestAccepts(t *testing.T) {
	for _, tc := range []struct {
		ae     []string
		coding string
		want   bool
	}{
		{nil, "gzip", false},
		{[]string{"gzip"}, "gzip", true},
		{[]string{"GZIP"}, "gzip", true},
		{[]string{"x-gzip"}, "gzip", true},
		{[]string{"gzip"}, "x-gzip", true},
		{[]string{"br, gzip;q=0"}, "gzip", false},
		{[]string{"gzip; q=0.001"}, "gzip", true},
		{[]string{"*"}, "gzip", true},
		{[]string{"*;q=0"}, "gzip", false},
		{[]string{"*", "gzip;q=0"}, "gzip", false},
		{[]string{"deflate", "br"}, "gzip", false},
		{[]string{"gzip;q=bad"}, "gzip", false},
		{[]string{"gzip;q=2"}, "gzip", false},
	} {
		if got := accepts(tc.ae, tc.coding); got != tc.want {
			t.Errorf("accepts(%q, %q) = %v, want %v", tc.ae, tc.coding, got, tc.want)
		}
	}
}

func TestForRequestLeavesAcceptedAndPlainAlone(t *testing.T) {
	plain := &Response{Status: 200, Body: []byte("x")}
	if got, err := forRequest(plain, nil); err != nil || got != plain {
		t.Errorf("plain response: %v, %v", got, err)
	}
	enc := &Response{Status: 200, Header: http.Header{"Content-Encoding": {"gzip"}}, Body: []byte("not gzip")}
	if got, err := forRequest(enc, []string{"gzip"}); err != nil || got != enc {
		t.Errorf("accepted coding: %v, %v", got, err)
	}
	if _, err := forRequest(enc, nil); err == nil {
		t.Error("a corrupt gzip body decoded without error")
	}
}

// FuzzForRequest feeds arbitrary Accept-Encoding values, codings and
// bodies to the replay's decoding: it never panics, and what it returns
// is the stored response, or a decoded copy without Content-Encoding.
func FuzzForRequest(f *testing.F) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write([]byte("hello"))
	w.Close()
	f.Add("gzip", "", gz.Bytes())
	f.Add("gzip, deflate", "br;q=1, *;q=0", []byte("x"))
	f.Add("identity", "gzip;q=0.5", []byte{})
	f.Add("x-gzip", "x-gzip", gz.Bytes())
	f.Fuzz(func(t *testing.T, ce, ae string, body []byte) {
		resp := &Response{Status: 200, Header: http.Header{"Content-Encoding": {ce}}, Body: body}
		got, err := forRequest(resp, []string{ae})
		if err != nil {
			return
		}
		if got != resp && len(got.Header["Content-Encoding"]) != 0 {
			t.Fatalf("a decoded replay keeps Content-Encoding %q", got.Header["Content-Encoding"])
		}
	})
}
