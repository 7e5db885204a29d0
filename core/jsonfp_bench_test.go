package idem

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// benchBody returns a JSON object of about n bytes: orders with nested
// objects, strings, numbers and a few escapes, as an API would get.
func benchBody(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"request_id":"5f1b0c9e-2a7d-4d8e-9c3b-6e2f1a0b7c4d","sent_at":"2026-12-01T10:00:00Z","items":[`)
	for i := 0; b.Len() < n-80; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%05d","name":"Caf\u00e9 no %d","qty":%d,"price":%d.%02d,"tags":["a","b"]}`, i, i, i%7+1, i%100, i%97)
	}
	b.WriteString(`],"currency":"EUR"}`)
	return []byte(b.String())
}

// BenchmarkFingerprint compares the default fingerprint with the JSON
// one (parse, canonicalize, hash) on the same body:
//
//	go test -run XXX -bench Fingerprint -count 6 | benchstat -col /fp -
func BenchmarkFingerprint(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		body := benchBody(size)
		r := httptest.NewRequest("POST", "/orders?x=1", nil)
		jc := &jsonConfig{}
		ign := &jsonConfig{}
		_ = Ignore("/sent_at", "/items/0/qty")(ign)
		for _, fp := range []struct {
			name string
			fn   func() string
		}{
			{"default", func() string { return fingerprintRequest(r, body) }},
			{"json", func() string { return must(jc.fingerprint(r, body, nil)) }},
			{"json-ignore", func() string { return must(ign.fingerprint(r, body, nil)) }},
		} {
			b.Run(fmt.Sprintf("size=%dKiB/fp=%s", size>>10, fp.name), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if fp.fn() == "" {
						b.Fatal("no fingerprint")
					}
				}
			})
		}
	}
}

func must(fp string, err error) string {
	if err != nil {
		panic(err)
	}
	return fp
}
