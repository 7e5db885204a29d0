package idem

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   string
		err    error
	}{
		{"bare", []string{"abc"}, "abc", nil},
		{"uuid", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"quoted", []string{`"abc"`}, "abc", nil},
		{"quoted with space", []string{`"a b"`}, "a b", nil},
		{"quoted escapes", []string{`"a\"b\\c"`}, `a"b\c`, nil},
		{"surrounding spaces", []string{"  abc\t"}, "abc", nil},
		{"quoted surrounding spaces", []string{` "abc" `}, "abc", nil},
		{"symbols", []string{"a:b/c+d=e_f.g~h*i!j"}, "a:b/c+d=e_f.g~h*i!j", nil},
		{"255 characters", []string{strings.Repeat("a", 255)}, strings.Repeat("a", 255), nil},
		{"255 quoted characters", []string{`"` + strings.Repeat(`\"`, 255) + `"`}, strings.Repeat(`"`, 255), nil},
		{"absent", nil, "", ErrMissingKey},
		{"empty", []string{""}, "", ErrInvalidKey},
		{"blank", []string{" \t "}, "", ErrInvalidKey},
		{"empty quoted", []string{`""`}, "", ErrInvalidKey},
		{"256 characters", []string{strings.Repeat("a", 256)}, "", ErrInvalidKey},
		{"256 quoted characters", []string{`"` + strings.Repeat("a", 256) + `"`}, "", ErrInvalidKey},
		{"two lines", []string{"a", "b"}, "", ErrInvalidKey},
		{"two equal lines", []string{"a", "a"}, "", ErrInvalidKey},
		{"list", []string{"a,b"}, "", ErrInvalidKey},
		{"quoted list", []string{`"a", "b"`}, "", ErrInvalidKey},
		{"parameters", []string{`"a";p=1`}, "", ErrInvalidKey},
		{"bare parameters", []string{`a;p=1`}, "", ErrInvalidKey},
		{"inner space", []string{"a b"}, "", ErrInvalidKey},
		{"inner quote", []string{`a"b`}, "", ErrInvalidKey},
		{"backslash", []string{`a\b`}, "", ErrInvalidKey},
		{"unterminated", []string{`"abc`}, "", ErrInvalidKey},
		{"dangling escape", []string{`"abc\`}, "", ErrInvalidKey},
		{"bad escape", []string{`"a\nb"`}, "", ErrInvalidKey},
		{"trailing garbage", []string{`"a"b`}, "", ErrInvalidKey},
		{"non-ASCII", []string{"clé"}, "", ErrInvalidKey},
		{"quoted non-ASCII", []string{`"clé"`}, "", ErrInvalidKey},
		{"control", []string{"a\x00b"}, "", ErrInvalidKey},
		{"quoted tab", []string{"\"a\tb\""}, "", ErrInvalidKey},
		{"DEL", []string{"a\x7fb"}, "", ErrInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKey(tc.values)
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("ParseKey(%q) error = %v, want %v", tc.values, err, tc.err)
			}
			if got != tc.want {
				t.Errorf("ParseKey(%q) = %q, want %q", tc.values, got, tc.want)
			}
			if err != nil && errors.Is(err, ErrInvalidKey) && !strings.Contains(err.Error(), ": ") {
				t.Errorf("error %q does not say why", err)
			}
		})
	}
}

// quote returns k as a Structured Field string.
func quote(k string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"abc", `"abc"`, `"a\"b"`, "a,b", `"a";x`, "", `"`, `\`, strings.Repeat("z", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := ParseKey([]string{v})
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ParseKey(%q): error %v does not wrap ErrInvalidKey", v, err)
			}
			return
		}
		if len(k) < 1 || len(k) > MaxKeyLength {
			t.Fatalf("ParseKey(%q) = %q: length %d out of range", v, k, len(k))
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte 0x%02x is not printable", v, k, k[i])
			}
		}
		// The quoted form of any key means the same key.
		if k2, err := ParseKey([]string{quote(k)}); err != nil || k2 != k {
			t.Fatalf("quoted %q parses to %q, %v; want %q", quote(k), k2, err, k)
		}
	})
}

func TestFingerprint(t *testing.T) {
	a := Fingerprint("POST", "/a", []byte("bc"))
	if len(a) != 64 || strings.ToLower(a) != a {
		t.Fatalf("fingerprint %q is not 64 lowercase hex digits", a)
	}
	if a != Fingerprint("POST", "/a", []byte("bc")) {
		t.Error("fingerprint is not deterministic")
	}
	for _, other := range [][3]string{
		{"POST", "/ab", "c"},
		{"POST", "/a?", "bc"},
		{"PATCH", "/a", "bc"},
		{"POST/", "a", "bc"},
		{"POST", "/a", "bc "},
	} {
		if Fingerprint(other[0], other[1], []byte(other[2])) == a {
			t.Errorf("%q collides with POST /a bc", other)
		}
	}
}

func TestScope(t *testing.T) {
	triples := [][3]string{
		{"", "POST", "/orders"},
		{"a", "POST", "/orders"},
		{"", "PATCH", "/orders"},
		{"", "POST", "/orders/{id}"},
		{"1:a", "POST", "/x"},
		{"", "POST", "1:a/x"},
		{"a4:POST", "", "/x"},
		{"aPOST", "", "/x"},
	}
	seen := map[string][3]string{}
	for _, tr := range triples {
		s := Scope(tr[0], tr[1], tr[2])
		if prev, ok := seen[s]; ok {
			t.Errorf("Scope%q and Scope%q both give %q", prev, tr, s)
		}
		seen[s] = tr
	}
	if got := Scope("acme", "POST", "/orders/{id}"); got != "4:acme4:POST12:/orders/{id}" {
		t.Errorf("Scope = %q", got)
	}
}

func FuzzScope(f *testing.F) {
	f.Add("a", "POST", "/x", "", "POST", "a/x")
	f.Fuzz(func(t *testing.T, n1, m1, r1, n2, m2, r2 string) {
		if Scope(n1, m1, r1) == Scope(n2, m2, r2) && (n1 != n2 || m1 != m2 || r1 != r2) {
			t.Fatalf("Scope(%q,%q,%q) == Scope(%q,%q,%q)", n1, m1, r1, n2, m2, r2)
		}
	})
}

// TestKeyErrorMessages pins the reasons a client developer reads in the
// 400's detail: a sentence, with the 1-based position of a bad byte in
// the header value as sent.
func TestKeyErrorMessages(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a b", "the key has a space at position 2; quote the key to keep its spaces, or remove them"},
		{"  clé", "the byte 0xc3 at position 5 is not printable ASCII; a key uses only the characters from '!' to '~'"},
		{"a,b", "the header holds a list of keys (a comma at position 2); send exactly one key"},
		{`"a" ,"b"`, "the header holds a list of keys (a comma at position 5); send exactly one key"},
		{`"a";x=1`, "parameters (a semicolon at position 4) are not allowed; send the key alone"},
		{`a"b`, `the character '"' at position 2 may only appear inside a quoted key, such as "a\"b"`},
		{`"a\nb"`, `the escape at position 3 is not valid; only \" and \\ may be escaped in a quoted key`},
		{`"abc`, "the quoted key has no closing quote"},
		{`"a"x`, "unexpected characters at position 4, after the closing quote; send the quoted key alone"},
		{"", "the key is empty; send 1 to 255 characters, such as a UUID"},
		{strings.Repeat("k", 256), "the key is 256 characters long; the limit is 255"},
	} {
		_, err := ParseKey([]string{tc.in})
		if err == nil || err.Error() != ErrInvalidKey.Error()+": "+tc.want {
			t.Errorf("ParseKey(%q):\n got %v\nwant %s", tc.in, err, tc.want)
		}
	}
	if _, err := ParseKey([]string{"a", "b"}); err == nil || !strings.HasSuffix(err.Error(), "the header was sent 2 times; send it once, with one key") {
		t.Errorf("two lines: %v", err)
	}
	if got := sentence("the key is empty; send one"); got != "The key is empty; send one." {
		t.Errorf("sentence: %q", got)
	}
}

func TestKeyFor(t *testing.T) {
	for _, id := range []string{"a", "msg:42", strings.Repeat("k", 255), "with space"} {
		if got := KeyFor(id); got != id {
			t.Errorf("KeyFor(%q) = %q, want it unchanged", id, got)
		}
	}
	for _, id := range []string{"", strings.Repeat("k", 256), "clé", "a\nb"} {
		got := KeyFor(id)
		if !strings.HasPrefix(got, "sha256:") || len(got) != 7+64 || checkKey(got) != nil {
			t.Errorf("KeyFor(%q) = %q, want a hashed key", id, got)
		}
	}
	if KeyFor("clé") == KeyFor("cle") {
		t.Error("two ids, one key")
	}
	ev := Event{key: "abc"}
	if KeyHash("abc") != ev.KeyHash() || KeyHash("") != "" {
		t.Errorf("KeyHash %q, Event.KeyHash %q", KeyHash("abc"), ev.KeyHash())
	}
}
