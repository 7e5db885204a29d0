package idem

import (
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
		return "", fmt.Errorf("%w: the header appears %d times; send it once", ErrInvalidKey, len(values))
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", fmt.Errorf("%w: the key is empty", ErrInvalidKey)
	}
	if v[0] == '"' {
		return parseQuoted(v)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == ',':
			return "", fmt.Errorf("%w: a list of keys is not allowed; send one key", ErrInvalidKey)
		case c == ';':
			return "", fmt.Errorf("%w: parameters are not allowed", ErrInvalidKey)
		case c == '"' || c == '\\':
			return "", fmt.Errorf("%w: %q may only appear inside a quoted key", ErrInvalidKey, c)
		case c == ' ' || c == '\t':
			return "", fmt.Errorf("%w: a bare key has no spaces; quote it", ErrInvalidKey)
		case c < 0x21 || c > 0x7e:
			return "", fmt.Errorf("%w: byte 0x%02x at position %d is not printable ASCII", ErrInvalidKey, c, i)
		}
	}
	if len(v) > MaxKeyLength {
		return "", fmt.Errorf("%w: %d characters, more than %d", ErrInvalidKey, len(v), MaxKeyLength)
	}
	return v, nil
}

// parseQuoted parses a Structured Field string that starts at v[0] == '"'
// and must be the whole of v.
func parseQuoted(v string) (string, error) {
	// Fast path: no escapes.
	end := -1
	escaped := false
	for i := 1; i < len(v); i++ {
		c := v[i]
		if c == '\\' {
			escaped = true
			i++
			if i < len(v) && v[i] != '"' && v[i] != '\\' {
				return "", fmt.Errorf("%w: only \\\" and \\\\ are valid escapes in a quoted key", ErrInvalidKey)
			}
			continue
		}
		if c == '"' {
			end = i
			break
		}
		if c < 0x20 || c > 0x7e {
			return "", fmt.Errorf("%w: byte 0x%02x at position %d is not printable ASCII", ErrInvalidKey, c, i)
		}
	}
	if end < 0 {
		return "", fmt.Errorf("%w: the quoted key has no closing quote", ErrInvalidKey)
	}
	if rest := strings.TrimLeft(v[end+1:], " \t"); rest != "" {
		switch rest[0] {
		case ',':
			return "", fmt.Errorf("%w: a list of keys is not allowed; send one key", ErrInvalidKey)
		case ';':
			return "", fmt.Errorf("%w: parameters are not allowed", ErrInvalidKey)
		}
		return "", fmt.Errorf("%w: unexpected characters after the closing quote", ErrInvalidKey)
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
		return "", fmt.Errorf("%w: the key is empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLength {
		return "", fmt.Errorf("%w: %d characters, more than %d", ErrInvalidKey, len(key), MaxKeyLength)
	}
	return key, nil
}
