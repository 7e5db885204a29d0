package idem

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// A JSONOption restricts what WithJSONFingerprint fingerprints.
type JSONOption func(*jsonConfig) error

type jsonConfig struct {
	only   []jsonPointer // sorted by raw text, no duplicates
	ignore []jsonPointer
}

// Only restricts the fingerprint to the values at these RFC 6901 JSON
// Pointers, such as "/amount" or "/items/0/sku" ("~1" stands for '/' and
// "~0" for '~' in a member name): two bodies that agree there are the same
// request, whatever else they hold. A pointer that names nothing in a
// body counts as absent, which differs from any value, null included.
// Only may be given more than once; the pointers add up.
func Only(pointers ...string) JSONOption {
	return func(c *jsonConfig) error {
		ps, err := parsePointers("Only", pointers)
		c.only = append(c.only, ps...)
		return err
	}
}

// Ignore leaves the values at these RFC 6901 JSON Pointers out of the
// fingerprint, such as a client timestamp ("/sent_at"), a signature or a
// trace id ("/meta/trace_id"), so that a retry which changes only them is
// still the same request. A pointer names one location: "/items/0/ts" is
// the ts of the first item only. With Only, Ignore removes values inside
// the ones Only picks. Ignore may be given more than once.
func Ignore(pointers ...string) JSONOption {
	return func(c *jsonConfig) error {
		ps, err := parsePointers("Ignore", pointers)
		c.ignore = append(c.ignore, ps...)
		return err
	}
}

// WithJSONFingerprint makes the fingerprint of a request with a body
// depend on the body's meaning as JSON rather than its bytes: the body is
// put in its RFC 8785 canonical form (see CanonicalJSON), with the values
// at Ignore's pointers left out or, with Only, just the values at its
// pointers, and fingerprinted together with the method and the path and
// query, as the default fingerprint does. Whitespace, member order,
// escapes (\u0061 or a) and the spelling of numbers (1, 1.0, 1e0) no
// longer make a retry a 422. An empty body is fingerprinted as empty.
//
// Every other body of a protected request must be one I-JSON value (see
// CanonicalJSON: duplicate member names, invalid UTF-8 and nesting deeper
// than MaxJSONDepth are invalid), whatever its Content-Type says, and as
// the middleware reads it: a compressed body (Content-Encoding: gzip) is
// JSON only behind a middleware that decompresses it first; otherwise the
// engine answers 400 with the invalid-json problem
// (OutcomeBodyUnreadable) and stores nothing. Numbers are compared as
// IEEE 754 doubles: integers beyond 2^53 that round to the same double,
// such as 9007199254740993 and 9007199254740992, are the same request;
// send such ids as strings. Switching an engine to it in production makes
// a retry of a request first sent with non-canonical JSON a 422 until
// those records expire.
//
// It replaces WithFingerprint: a policy given both panics, as
// WithJSONFingerprint does for a malformed pointer (an error wrapping
// ErrBadOption). It applies to
// HTTP requests; an Engine.Do caller fingerprints JSON the same way with
// Fingerprint(kind, name, canonical), canonical from CanonicalJSON.
// Default: the body's bytes.
//
//	idem.WithJSONFingerprint(idem.Ignore("/sent_at", "/signature"))
func WithJSONFingerprint(opts ...JSONOption) HTTPOption {
	jc := &jsonConfig{}
	var err error
	for _, o := range opts {
		if o != nil && err == nil {
			err = o(jc)
		}
	}
	jc.only = sortPointers(jc.only)
	jc.ignore = sortPointers(jc.ignore)
	return mustHTTP(err, func(c *httpConfig) { c.jsonFP = jc })
}

// WithKeyField takes the key of a request without the key header from
// the top-level string member name of its JSON body, as in AIP-155's
// request_id:
//
//	{"request_id": "5f1b0c9e-2a7d-4d8e-9c3b-6e2f1a0b7c4d", "amount": 100}
//
// The header wins when both are present. The field's value is checked as
// a header key is (1 to MaxKeyLength printable ASCII characters, spaces
// included) and a bad one gets the same 400 invalid-key answer; a field
// that is not a string is invalid too. A body without the field (an empty
// body, an array, an object without it) has no key: the request is
// refused with 400 missing-key where the key is required, and runs
// unprotected where it is optional (Optional), as a
// request without the header does. A body that is not valid JSON (see
// CanonicalJSON) gets 400 invalid-json, optional key or not.
//
// To find the field the engine reads the body before the claim, up to
// WithMaxRequestBody (413 beyond it), as it reads the body of every
// request with a key anyway, and gives the handler the same bytes; so a
// request without the header on an optional route, which used to pass
// through unread, now has its body read and checked too. It applies to
// HTTP requests, not to Engine.Do. Default: the key comes only from the
// header.
func WithKeyField(name string) HTTPOption {
	return mustHTTP(failIf(name == "" || !utf8.ValidString(name), "key field %q is not a valid JSON member name", name),
		func(c *httpConfig) { c.keyField = name })
}

// jsonPointer is a parsed RFC 6901 JSON Pointer.
type jsonPointer struct {
	raw    string
	tokens []string
}

// parsePointer parses a JSON Pointer naming a part of a body; the empty
// pointer (the whole body) is refused.
func parsePointer(s string) (jsonPointer, error) {
	if s == "" {
		return jsonPointer{}, fmt.Errorf("the empty pointer names the whole body")
	}
	if s[0] != '/' {
		return jsonPointer{}, fmt.Errorf("the pointer %q does not start with '/'", s)
	}
	if !utf8.ValidString(s) {
		return jsonPointer{}, fmt.Errorf("the pointer %q is not valid UTF-8", s)
	}
	p := jsonPointer{raw: s}
	for _, tok := range strings.Split(s[1:], "/") {
		if !strings.Contains(tok, "~") {
			p.tokens = append(p.tokens, tok)
			continue
		}
		var b strings.Builder
		for i := 0; i < len(tok); i++ {
			if tok[i] != '~' {
				b.WriteByte(tok[i])
				continue
			}
			if i+1 >= len(tok) || (tok[i+1] != '0' && tok[i+1] != '1') {
				return jsonPointer{}, fmt.Errorf("the pointer %q has a '~' not followed by 0 or 1 (write ~0 for '~' and ~1 for '/')", s)
			}
			b.WriteByte("~/"[tok[i+1]-'0'])
			i++
		}
		p.tokens = append(p.tokens, b.String())
	}
	return p, nil
}

func parsePointers(opt string, raw []string) ([]jsonPointer, error) {
	if len(raw) == 0 {
		return nil, badOption("%s: no pointers", opt)
	}
	ps := make([]jsonPointer, 0, len(raw))
	for _, s := range raw {
		p, err := parsePointer(s)
		if err != nil {
			return nil, badOption("%s: %w", opt, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func sortPointers(ps []jsonPointer) []jsonPointer {
	slices.SortFunc(ps, func(a, b jsonPointer) int { return strings.Compare(a.raw, b.raw) })
	return slices.CompactFunc(ps, func(a, b jsonPointer) bool { return a.raw == b.raw })
}

// arrayIndex returns the array index a reference token names, if any: a
// decimal without leading zeros (RFC 6901, section 4).
func arrayIndex(tok string, n int) (int, bool) {
	if tok == "" || (len(tok) > 1 && tok[0] == '0') || len(tok) > 9 {
		return 0, false
	}
	i, err := strconv.Atoi(tok)
	if err != nil || i < 0 || i >= n || tok[0] == '+' || tok[0] == '-' {
		return 0, false
	}
	return i, true
}

// lookup returns the value p names in v, or nil when it names nothing.
func (p *jsonPointer) lookup(v *jvalue) *jvalue {
	for _, tok := range p.tokens {
		switch v.kind {
		case jObject:
			i, ok := slices.BinarySearchFunc(v.kids, []byte(tok), func(m jmember, t []byte) int { return compareUTF16(m.name, t) })
			if !ok {
				return nil
			}
			v = &v.kids[i].val
		case jArray:
			i, ok := arrayIndex(tok, len(v.kids))
			if !ok {
				return nil
			}
			v = &v.kids[i].val
		default:
			return nil
		}
		if v.kind == jGone {
			return nil
		}
	}
	return v
}

// canonical appends the canonical text the fingerprint covers: the
// document without Ignore's values, or, with Only, the JSON array of
// [pointer, value] pairs, [pointer] for a pointer that names nothing.
// It marks ignored values in v.
func (jc *jsonConfig) canonical(dst []byte, v *jvalue) []byte {
	for i := range jc.ignore {
		if x := jc.ignore[i].lookup(v); x != nil {
			*x = jvalue{kind: jGone}
		}
	}
	if jc.only == nil {
		return appendCanonical(dst, v)
	}
	dst = append(dst, '[')
	for i := range jc.only {
		if i > 0 {
			dst = append(dst, ',')
		}
		p := &jc.only[i]
		dst = append(dst, '[')
		dst = appendJCSString(dst, p.raw)
		if x := p.lookup(v); x != nil {
			dst = append(dst, ',')
			dst = appendCanonical(dst, x)
		}
		dst = append(dst, ']')
	}
	return append(dst, ']')
}

var canonPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// fingerprint returns the fingerprint of r with WithJSONFingerprint; doc
// is its body already parsed, or nil. It fails on invalid JSON.
func (jc *jsonConfig) fingerprint(r *http.Request, body []byte, doc *jvalue) (string, error) {
	if len(body) == 0 {
		return fingerprintRequest(r, nil), nil
	}
	if doc == nil {
		v, p, err := parseJSON(body)
		if err != nil {
			return "", err
		}
		defer p.release()
		doc = &v
	}
	bp := canonPool.Get().(*[]byte)
	*bp = jc.canonical((*bp)[:0], doc)
	fp := fingerprintRequest(r, *bp)
	if cap(*bp) <= 2<<20 {
		canonPool.Put(bp)
	}
	return fp, nil
}

// jsonFingerprint is Serve's fingerprint with WithJSONFingerprint; doc is
// the body parsed by keyFromBody, or nil, and is released. On
// invalid JSON it answers 400 and returns false.
func (x *exchange) jsonFingerprint(body []byte, doc *jsonDoc) (string, bool) {
	var v *jvalue
	if doc != nil {
		v = &doc.v
		defer doc.release()
	}
	fp, err := x.p.h.jsonFP.fingerprint(x.r, body, v)
	if err != nil {
		x.invalidJSON(err)
		return "", false
	}
	return fp, true
}

func (x *exchange) invalidJSON(err error) {
	x.f.ev.Err = err
	x.fail(OutcomeBodyUnreadable, problemInvalidJSON, sentence(strings.TrimPrefix(err.Error(), "idem: ")))
}

// keyFromBody takes the key from the body's key field (WithKeyField). It
// returns the parsed body for the fingerprint. When there is no usable
// key it answers the request (400, or runs it unprotected where the key
// is optional) and returns false.
func (x *exchange) keyFromBody(body []byte) (string, *jsonDoc, bool) {
	h := x.p.h
	name := h.keyField
	var doc *jsonDoc
	var field *jvalue
	if len(body) > 0 {
		v, p, err := parseJSON(body)
		if err != nil {
			x.invalidJSON(err)
			return "", nil, false
		}
		doc = &jsonDoc{v, p}
		if v.kind == jObject {
			ptr := jsonPointer{tokens: []string{name}}
			field = ptr.lookup(&doc.v)
		}
	}
	key, err := "", error(nil)
	if field != nil {
		key, err = checkFieldKey(name, field) // a copy: doc may go
	}
	if h.jsonFP == nil || field == nil || err != nil {
		doc.release()
		doc = nil
	}
	switch {
	case field == nil && !x.p.required:
		x.skip()
		return "", nil, false
	case field == nil:
		x.fail(OutcomeMissingKey, problemMissingKey, "Send an "+h.keyHeader+" header, or a "+
			strconv.Quote(name)+" string member in the JSON body, with a unique key, such as a UUID.")
		return "", nil, false
	case err != nil:
		x.f.ev.Err = err
		x.fail(OutcomeInvalidKey, problemInvalidKey, sentence(strings.TrimPrefix(err.Error(), ErrInvalidKey.Error()+": ")))
		return "", nil, false
	}
	return key, doc, true
}

// jsonDoc is a body parsed as JSON, kept from the key field to the
// fingerprint.
type jsonDoc struct {
	v jvalue
	p *jparser
}

func (d *jsonDoc) release() {
	if d != nil {
		d.p.release()
	}
}

// checkFieldKey checks the key a body's key field holds, as ParseKey
// checks a header's.
func checkFieldKey(name string, v *jvalue) (string, error) {
	if v.kind != jString {
		kind := [...]string{jNull: "null", jFalse: "a boolean", jTrue: "a boolean", jNumber: "a number", jArray: "an array", jObject: "an object"}[v.kind]
		return "", invalidKey("the body's %q member is %s; send the key as a string", name, kind)
	}
	k := string(v.s)
	if k == "" {
		return "", invalidKey("the body's %q member is empty; send 1 to %d characters, such as a UUID", name, MaxKeyLength)
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c > 0x7e {
			return "", invalidKey("the body's %q member has the byte 0x%02x at position %d, which is not printable ASCII; a key uses only the characters from space to '~'", name, c, i+1)
		}
	}
	if len(k) > MaxKeyLength {
		return "", invalidKey("the body's %q member is %d characters long; the limit is %d", name, len(k), MaxKeyLength)
	}
	return k, nil
}

// bodyKey reports whether Serve takes the key from the body: the policy
// has a key field and the header is absent.
func (h *httpConfig) bodyKey(headerErr error) bool {
	return h.keyField != "" && errors.Is(headerErr, ErrMissingKey)
}
