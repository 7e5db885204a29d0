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
