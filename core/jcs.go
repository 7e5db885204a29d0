package idem

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
)

// This file is a JSON parser and an RFC 8785 (JCS) serializer, for
// WithJSONFingerprint and WithKeyField (jsonfp.go).

// ErrInvalidJSON is wrapped by the errors CanonicalJSON returns, and is
// the reason of the engine's invalid-json answer.
var ErrInvalidJSON = errors.New("idem: invalid JSON")

// MaxJSONDepth is how deeply objects and arrays may nest in a body that
// CanonicalJSON, WithJSONFingerprint or WithKeyField reads; a deeper one
// is invalid.
const MaxJSONDepth = 1000

// CanonicalJSON returns the RFC 8785 (JCS) canonical form of the JSON
// text b: object members sorted by the UTF-16 code units of their names,
// no whitespace, strings with only the escapes JCS requires, numbers as
// ECMAScript's Number.prototype.toString writes the nearest IEEE 754
// double (1.0, 1 and 1e0 are all 1; 1E30 is 1e+30; an integer beyond 2^53
// becomes its nearest double, so 9007199254740993 is 9007199254740992).
//
// b must be one I-JSON (RFC 7493) value: valid UTF-8, no unpaired
// surrogate escapes, no duplicate member names in an object (after
// unescaping), no number beyond the double range, nesting at most
// MaxJSONDepth deep. Otherwise CanonicalJSON returns an error wrapping
// ErrInvalidJSON that says what is wrong and at which byte offset (counted from 0).
func CanonicalJSON(b []byte) ([]byte, error) {
	v, p, err := parseJSON(b)
	if err != nil {
		return nil, err
	}
	defer p.release()
	return appendCanonical(nil, &v), nil
}

type jkind uint8

const (
	jNull jkind = iota
	jFalse
	jTrue
	jNumber // s holds the canonical number text
	jString // s holds the decoded string
	jArray
	jObject // obj sorted by name, in UTF-16 code unit order
	jGone   // removed by Ignore: written as if absent
)

// jvalue is a parsed JSON value. Its bytes alias the parsed text where
// they can (a string without escapes, a number already canonical).
type jvalue struct {
	kind jkind
	s    []byte    // a string's decoded bytes, a number's canonical text
	kids []jmember // an array's elements (no names) or an object's members
}

type jmember struct {
	name []byte
	val  jvalue
}

type jparser struct {
	b     []byte
	i     int
	depth int
	buf   []byte    // scratch for strings with escapes
	stack []jmember // the elements of the containers being parsed
	arena []jmember // where finished containers take their elements from
	strs  []byte    // where strings with escapes are decoded to
}

// parsers are reused, so that parsing a body allocates next to nothing.
var parsers = sync.Pool{New: func() any { return new(jparser) }}

// release returns p to the pool; the values it parsed must no longer be
// used.
func (p *jparser) release() {
	if cap(p.arena) > 1<<16 || cap(p.strs) > 1<<20 {
		return
	}
	clear(p.arena)
	p.b, p.arena, p.strs = nil, p.arena[:0], p.strs[:0]
	parsers.Put(p)
}

// keep moves the string p.buf decoded into p.strs and returns it.
func (p *jparser) keep() []byte {
	n := len(p.buf)
	if cap(p.strs)-len(p.strs) < n {
		p.strs = make([]byte, 0, max(n, 2*cap(p.strs), 256))
	}
	start := len(p.strs)
	p.strs = append(p.strs, p.buf...)
	return p.strs[start : start+n : start+n]
}

// finish moves the elements pushed on the stack since base into the
// arena and returns them.
func (p *jparser) finish(base int) []jmember {
	n := len(p.stack) - base
	if n == 0 {
		return nil
	}
	if cap(p.arena)-len(p.arena) < n {
		p.arena = make([]jmember, 0, max(n, 2*cap(p.arena), 32))
	}
	kids := append(p.arena[len(p.arena):len(p.arena):len(p.arena)+n], p.stack[base:]...)
	p.arena = p.arena[:len(p.arena)+n]
	clear(p.stack[base:])
	p.stack = p.stack[:base]
	return kids
}

// parseJSON parses b. The value lives in memory of the parser it
// returns: call its release method once the value is no longer used.
func parseJSON(b []byte) (jvalue, *jparser, error) {
	p := parsers.Get().(*jparser)
	p.b, p.i, p.depth = b, 0, 0
	p.stack = p.stack[:0]
	p.ws()
	v, err := p.value()
	if err == nil {
		p.ws()
		if p.i < len(b) {
			err = p.fail("unexpected %s after the value", p.what())
		}
	}
	if err != nil {
		clear(p.stack)
		p.release()
		return jvalue{}, nil, err
	}
	return v, p, nil
}

func (p *jparser) fail(format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: "+format, append([]any{ErrInvalidJSON, p.i}, args...)...)
}

// what names the byte at p.i for an error.
func (p *jparser) what() string {
	if p.i >= len(p.b) {
		return "end of input"
	}
	if c := p.b[p.i]; c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", p.b[p.i])
}

func (p *jparser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jparser) value() (jvalue, error) {
	if p.i >= len(p.b) {
		return jvalue{}, p.fail("unexpected end of input, want a value")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.str()
		return jvalue{kind: jString, s: s}, err
	case c == '-' || ('0' <= c && c <= '9'):
		return p.number()
	case p.literal("null"):
		return jvalue{kind: jNull}, nil
	case p.literal("true"):
		return jvalue{kind: jTrue}, nil
	case p.literal("false"):
		return jvalue{kind: jFalse}, nil
	}
	return jvalue{}, p.fail("unexpected %s, want a value", p.what())
}

func (p *jparser) literal(lit string) bool {
	if len(p.b)-p.i >= len(lit) && string(p.b[p.i:p.i+len(lit)]) == lit {
		p.i += len(lit)
		return true
	}
	return false
}

func (p *jparser) enter() error {
	p.depth++
	if p.depth > MaxJSONDepth {
		return p.fail("nested deeper than %d levels", MaxJSONDepth)
	}
	p.i++
	p.ws()
	return nil
}

func (p *jparser) array() (jvalue, error) {
	if err := p.enter(); err != nil {
		return jvalue{}, err
	}
	v := jvalue{kind: jArray}
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		p.depth--
		return v, nil
	}
	base := len(p.stack)
	for {
		e, err := p.value()
		if err != nil {
			return jvalue{}, err
		}
		p.stack = append(p.stack, jmember{val: e})
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ',' {
			p.i++
			p.ws()
			continue
		}
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			p.depth--
			v.kids = p.finish(base)
			return v, nil
		}
		return jvalue{}, p.fail("unexpected %s in an array, want ',' or ']'", p.what())
	}
}

func (p *jparser) object() (jvalue, error) {
	start := p.i
	if err := p.enter(); err != nil {
		return jvalue{}, err
	}
	v := jvalue{kind: jObject}
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		p.depth--
		return v, nil
	}
	base := len(p.stack)
	for {
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return jvalue{}, p.fail("unexpected %s in an object, want a member name", p.what())
		}
		name, err := p.str()
		if err != nil {
			return jvalue{}, err
		}
		p.ws()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return jvalue{}, p.fail("unexpected %s after a member name, want ':'", p.what())
		}
		p.i++
		p.ws()
		e, err := p.value()
		if err != nil {
			return jvalue{}, err
		}
		p.stack = append(p.stack, jmember{name, e})
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ',' {
			p.i++
			p.ws()
			continue
		}
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			p.depth--
			break
		}
		return jvalue{}, p.fail("unexpected %s in an object, want ',' or '}'", p.what())
	}
	v.kids = p.finish(base)
	slices.SortFunc(v.kids, func(a, b jmember) int { return compareUTF16(a.name, b.name) })
	for k := 1; k < len(v.kids); k++ {
		if bytes.Equal(v.kids[k].name, v.kids[k-1].name) {
			p.i = start
			return jvalue{}, p.fail("the object starting there has the member name %q twice", v.kids[k].name)
		}
	}
	return v, nil
}

// number parses a number by the JSON grammar and keeps its JCS form.
func (p *jparser) number() (jvalue, error) {
	start := p.i
	b := p.b
	if b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(b) && b[p.i] == '0':
		p.i++
	case p.i < len(b) && '1' <= b[p.i] && b[p.i] <= '9':
		p.digits()
	default:
		return jvalue{}, p.fail("unexpected %s in a number, want a digit", p.what())
	}
	if p.i < len(b) && b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return jvalue{}, p.fail("unexpected %s after a decimal point, want a digit", p.what())
		}
	}
	if p.i < len(b) && (b[p.i] == 'e' || b[p.i] == 'E') {
		p.i++
		if p.i < len(b) && (b[p.i] == '+' || b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return jvalue{}, p.fail("unexpected %s in an exponent, want a digit", p.what())
		}
	}
	lit := b[start:p.i]
	if plainInt(lit) {
		return jvalue{kind: jNumber, s: lit}, nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil || math.IsInf(f, 0) {
		p.i = start
		return jvalue{}, p.fail("the number %s is beyond the range of a double", b[start:min(len(b), start+40)])
	}
	if cap(p.strs)-len(p.strs) < 32 { // appendES writes at most 25 bytes
		p.strs = make([]byte, 0, max(2*cap(p.strs), 256))
	}
	start = len(p.strs)
	p.strs = appendES(p.strs, f)
	return jvalue{kind: jNumber, s: p.strs[start:len(p.strs):len(p.strs)]}, nil
}

// plainInt reports whether the number literal n is already in its JCS
// form: an integer of at most 15 digits (below 2^53, so exact), not -0.
func plainInt(n []byte) bool {
	d := n
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
	}
	if len(d) == 0 || len(d) > 15 || (len(d) == 1 && d[0] == '0' && len(n) == 2) {
		return false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func (p *jparser) digits() int {
	n := 0
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}
