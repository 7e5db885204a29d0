package idem

import (
	"unicode/utf16"
	"unicode/utf8"
)

// The strings of the JSON parser (jcs.go): validated, and unescaped only
// when they hold escapes.

// str parses a string starting at its opening quote and returns it
// decoded. It rejects invalid UTF-8, raw control characters and unpaired
// surrogate escapes (RFC 7493, section 2.1).
func (p *jparser) str() ([]byte, error) {
	p.i++
	start := p.i
	b := p.b
	for p.i < len(b) {
		c := b[p.i]
		if plainASCII[c] {
			p.i++
			continue
		}
		switch {
		case c == '"':
			p.i++
			return b[start : p.i-1 : p.i-1], nil
		case c == '\\':
			p.buf = append(p.buf[:0], b[start:p.i]...)
			return p.escaped()
		case c < 0x20:
			return nil, p.fail("the control character 0x%02x in a string must be escaped", c)
		case c < utf8.RuneSelf:
			p.i++
		default:
			r, n := utf8.DecodeRune(b[p.i:])
			if r == utf8.RuneError && n == 1 {
				return nil, p.fail("a string holds invalid UTF-8")
			}
			p.i += n
		}
	}
	return nil, p.fail("a string has no closing quote")
}

// plainASCII marks the bytes a string holds as they are, in JSON text
// and in JCS: printable ASCII but '"' and '\'.
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// escaped continues str from the first backslash, decoding into p.buf.
func (p *jparser) escaped() ([]byte, error) {
	b := p.b
	for p.i < len(b) {
		c := b[p.i]
		switch {
		case c == '"':
			p.i++
			return p.keep(), nil
		case c == '\\':
			if err := p.escape(); err != nil {
				return nil, err
			}
		case c < 0x20:
			return nil, p.fail("the control character 0x%02x in a string must be escaped", c)
		case c < utf8.RuneSelf:
			p.buf = append(p.buf, c)
			p.i++
		default:
			r, n := utf8.DecodeRune(b[p.i:])
			if r == utf8.RuneError && n == 1 {
				return nil, p.fail("a string holds invalid UTF-8")
			}
			p.buf = append(p.buf, b[p.i:p.i+n]...)
			p.i += n
		}
	}
	return nil, p.fail("a string has no closing quote")
}

// escape decodes the escape at p.i (a backslash) into p.buf.
func (p *jparser) escape() error {
	if p.i+1 >= len(p.b) {
		return p.fail("a string has no closing quote")
	}
	c := p.b[p.i+1]
	if i := indexByte(`"\/bfnrt`, c); i >= 0 {
		p.buf = append(p.buf, "\"\\/\b\f\n\r\t"[i])
		p.i += 2
		return nil
	}
	if c != 'u' {
		return p.fail("the escape \\%c is not valid JSON", c)
	}
	r, ok := p.hex4(p.i + 2)
	if !ok {
		return p.fail("the escape \\u needs four hex digits")
	}
	p.i += 6
	if utf16.IsSurrogate(r) {
		r2, ok := rune(-1), false
		if r < 0xdc00 && p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
			r2, ok = p.hex4(p.i + 2)
		}
		if !ok || r2 < 0xdc00 || r2 > 0xdfff {
			p.i -= 6
			return p.fail("the escape \\u%04x is half of a surrogate pair without its other half", r)
		}
		p.i += 6
		r = utf16.DecodeRune(r, r2)
	}
	p.buf = utf8.AppendRune(p.buf, r)
	return nil
}

func (p *jparser) hex4(at int) (rune, bool) {
	if at+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[at : at+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
