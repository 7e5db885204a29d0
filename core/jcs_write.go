package idem

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// This file writes the RFC 8785 (JCS) form of a value parsed by jcs.go.

// compareUTF16 orders valid UTF-8 strings as their UTF-16 code units
// would sort (RFC 8785, section 3.2.3): code point order, except that
// characters beyond U+FFFF (surrogate pairs) sort before U+E000..U+FFFF.
func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		if a[0] == b[0] && a[0] < utf8.RuneSelf {
			a, b = a[1:], b[1:]
			continue
		}
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if ra != rb {
			return int(utf16Key(ra)) - int(utf16Key(rb))
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

// utf16Key maps a code point to a value whose order is its UTF-16 code
// units' order: a supplementary character sorts by its high surrogate
// (then by its low one), below U+E000.
func utf16Key(r rune) rune {
	if r < 0x10000 {
		return r << 10
	}
	hi, lo := utf16.EncodeRune(r)
	return hi<<10 | (lo - 0xdc00)
}

// appendCanonical appends the JCS form of v.
func appendCanonical(dst []byte, v *jvalue) []byte {
	switch v.kind {
	case jNull:
		return append(dst, "null"...)
	case jFalse:
		return append(dst, "false"...)
	case jTrue:
		return append(dst, "true"...)
	case jNumber:
		return append(dst, v.s...)
	case jString:
		return appendJCSString(dst, v.s)
	case jArray, jObject:
		open, end := byte('['), byte(']')
		if v.kind == jObject {
			open, end = '{', '}'
		}
		dst = append(dst, open)
		first := true
		for i := range v.kids {
			m := &v.kids[i]
			if m.val.kind == jGone {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			if v.kind == jObject {
				dst = appendJCSString(dst, m.name)
				dst = append(dst, ':')
			}
			dst = appendCanonical(dst, &m.val)
		}
		return append(dst, end)
	}
	return dst
}

// appendJCSString appends s quoted as RFC 8785, section 3.2.2.2 says: only
// '"', '\' and the control characters escaped, the latter as \b, \t, \n,
// \f, \r or \u00xx in lowercase hex; everything else as it is.
func appendJCSString[S ~string | ~[]byte](dst []byte, s S) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plainASCII[c] || c >= 0x80 {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendES appends the finite double f as ECMAScript's
// Number.prototype.toString writes it (ECMA-262, Number::toString): the
// shortest digits that round-trip, in plain notation when the decimal
// exponent is from -6 to 20, and otherwise as d.ddde±x.
func appendES(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // and -0
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64) // d[.ddd]e±xx
	var digits [24]byte
	k := 0
	i := 0
	for ; e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits[k] = e[i]
			k++
		}
	}
	x, _ := strconv.Atoi(string(e[i+1:]))
	n := x + 1 // the value is 0.digits × 10^n
	d := digits[:k]
	switch {
	case k <= n && n <= 21:
		dst = append(dst, d...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, d[:n]...)
		dst = append(dst, '.')
		dst = append(dst, d[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, d...)
	default:
		dst = append(dst, d[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, d[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}
