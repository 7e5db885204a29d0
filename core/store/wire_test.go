package store

import (
	"encoding/binary"
	"math"
	"testing"
)

func TestReadUvarint(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		v    uint64
		rest string
		ok   bool
	}{
		{"zero", "\x00tail", 0, "tail", true},
		{"one byte", "\x7f", 127, "", true},
		{"two bytes", "\x80\x01x", 128, "x", true},
		{"largest", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", math.MaxUint64, "", true},
		{"empty", "", 0, "", false},
		{"cut short", "\x80", 0, "", false},
		{"overlong", "\x80\x00", 0, "", false},
		{"overlong zero", "\x80\x80\x00", 0, "", false},
		{"overflows", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 0, "", false},
		{"eleven bytes", "\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 0, "", false},
	} {
		v, rest, ok := ReadUvarint(tc.in)
		if v != tc.v || rest != tc.rest || ok != tc.ok {
			t.Errorf("%s: ReadUvarint(%q) = %d, %q, %v; want %d, %q, %v", tc.name, tc.in, v, rest, ok, tc.v, tc.rest, tc.ok)
		}
	}
}

func TestReadChunk(t *testing.T) {
	for _, tc := range []struct {
		in, chunk, rest string
		ok              bool
	}{
		{"\x00", "", "", true},
		{"\x03abcde", "abc", "de", true},
		{"\x03ab", "", "", false},
		{"\x80\x00", "", "", false},
		{"", "", "", false},
	} {
		c, rest, ok := ReadChunk(tc.in)
		if c != tc.chunk || rest != tc.rest || ok != tc.ok {
			t.Errorf("ReadChunk(%q) = %q, %q, %v; want %q, %q, %v", tc.in, c, rest, ok, tc.chunk, tc.rest, tc.ok)
		}
	}
}

// FuzzReadUvarint checks ReadUvarint against encoding/binary: it accepts
// exactly what AppendUvarint writes, and reads it back.
func FuzzReadUvarint(f *testing.F) {
	for _, s := range []string{"", "\x00", "\x80\x01", "\x80\x00", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "\x03abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, rest, ok := ReadUvarint(s)
		if !ok {
			if rest != "" || v != 0 {
				t.Fatalf("refused %q but returned %d, %q", s, v, rest)
			}
			w, n := binary.Uvarint([]byte(s))
			if n > 0 && string(binary.AppendUvarint(nil, w)) == s[:n] {
				t.Fatalf("refused %q, the shortest encoding of %d", s, w)
			}
			return
		}
		enc := binary.AppendUvarint(nil, v)
		if string(enc)+rest != s {
			t.Fatalf("ReadUvarint(%q) = %d, %q: not the shortest encoding of %d followed by the rest", s, v, rest, v)
		}
		if c, r, ok := ReadChunk(s); ok && (uint64(len(c)) != v || c+r != rest) {
			t.Fatalf("ReadChunk(%q) = %q, %q", s, c, r)
		}
	})
}
