package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Key parsing errors. ParseKey wraps ErrInvalidKey with the reason.
var (
	// ErrMissingKey means the request carries no idempotency key header.
	ErrMissingKey = errors.New("idem: missing idempotency key")
	// ErrInvalidKey means the header is present but its value is not one
	// valid key.
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
)

// MaxKeyLength is the longest key ParseKey accepts, in characters.
const MaxKeyLength = 255

// ParseKey returns the idempotency key carried by the values of one header
// (as http.Header.Values returns them).
//
// The value is either a Structured Field string (RFC 9651), such as
// "abc" with \" and \\ as its only escapes, or a bare key such as abc; both
// mean the key abc. Surrounding spaces and tabs are ignored. A key is 1 to
// MaxKeyLength characters of printable ASCII (a bare key has no spaces and
// no '"', ',', ';' or '\'). No value gives ErrMissingKey; several header
// lines, a list ("a", "b"), parameters (;x=1), an empty key or any other
// malformed value give an error wrapping ErrInvalidKey that says why.
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", ErrMissingKey
	case 1:
	default:
		return "", invalidKey("the header was sent %d times; send it once, with one key", len(values))
	}
	raw := values[0]
	v := strings.TrimLeft(raw, " \t")
	off := len(raw) - len(v) // bytes trimmed before the key, for 1-based positions in raw
	v = strings.TrimRight(v, " \t")
	if v == "" {
		return "", invalidKey("the key is empty; send 1 to %d characters, such as a UUID", MaxKeyLength)
	}
	if v[0] == '"' {
		return parseQuoted(v, off)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == ',':
			return "", invalidKey("the header holds a list of keys (a comma at position %d); send exactly one key", off+i+1)
		case c == ';':
			return "", invalidKey("parameters (a semicolon at position %d) are not allowed; send the key alone", off+i+1)
		case c == '"' || c == '\\':
			return "", invalidKey("the character %q at position %d may only appear inside a quoted key, such as \"a\\\"b\"", c, off+i+1)
		case c == ' ' || c == '\t':
			return "", invalidKey("the key has a space at position %d; quote the key to keep its spaces, or remove them", off+i+1)
		case c < 0x21 || c > 0x7e:
			return "", invalidKey("the byte 0x%02x at position %d is not printable ASCII; a key uses only the characters from '!' to '~'", c, off+i+1)
		}
	}
	if len(v) > MaxKeyLength {
		return "", invalidKey("the key is %d characters long; the limit is %d", len(v), MaxKeyLength)
	}
	return v, nil
}

// invalidKey returns an error wrapping ErrInvalidKey that says why in a
// sentence a client developer can act on (the HTTP answer's detail).
func invalidKey(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidKey}, args...)...)
}

// parseQuoted parses a Structured Field string that starts at v[0] == '"'
// and must be the whole of v; off is v's offset in the header value.
func parseQuoted(v string, off int) (string, error) {
	end := -1
	escaped := false
	for i := 1; i < len(v); i++ {
		c := v[i]
		if c == '\\' {
			escaped = true
			i++
			if i < len(v) && v[i] != '"' && v[i] != '\\' {
				return "", invalidKey("the escape at position %d is not valid; only \\\" and \\\\ may be escaped in a quoted key", off+i)
			}
			continue
		}
		if c == '"' {
			end = i
			break
		}
		if c < 0x20 || c > 0x7e {
			return "", invalidKey("the byte 0x%02x at position %d is not printable ASCII; a quoted key uses only the characters from space to '~'", c, off+i+1)
		}
	}
	if end < 0 {
		return "", invalidKey("the quoted key has no closing quote")
	}
	if rest := strings.TrimLeft(v[end+1:], " \t"); rest != "" {
		pos := off + len(v) - len(rest) + 1
		switch rest[0] {
		case ',':
			return "", invalidKey("the header holds a list of keys (a comma at position %d); send exactly one key", pos)
		case ';':
			return "", invalidKey("parameters (a semicolon at position %d) are not allowed; send the key alone", pos)
		}
		return "", invalidKey("unexpected characters at position %d, after the closing quote; send the quoted key alone", pos)
	}
	key := v[1:end]
	if escaped {
		var b strings.Builder
		b.Grow(len(key))
		for i := 0; i < len(key); i++ {
			if key[i] == '\\' {
				i++
			}
			b.WriteByte(key[i])
		}
		key = b.String()
	}
	if key == "" {
		return "", invalidKey("the key is empty; send 1 to %d characters, such as a UUID", MaxKeyLength)
	}
	if len(key) > MaxKeyLength {
		return "", invalidKey("the key is %d characters long; the limit is %d", len(key), MaxKeyLength)
	}
	return key, nil
}

// KeyFor returns id as a key for Op.Key when it is one (1 to MaxKeyLength
// printable ASCII characters), and otherwise "sha256:" and its hex
// SHA-256, so that any identifier a transport carries (a message id of any
// length or bytes) can key an operation. Prefix ids of different kinds
// yourself ("msg:", "seq:") so they cannot collide.
//
//	op.Key = idem.KeyFor("msg:" + msg.Header.Get("Nats-Msg-Id"))
func KeyFor(id string) string {
	if checkKey(id) == nil {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// KeyHash returns the hash the engine's events and logs give a key
// (Event.KeyHash): the first 16 hex digits of its SHA-256, or "" for no
// key. Log it instead of the key.
func KeyHash(key string) string { return hashKey(key) }
