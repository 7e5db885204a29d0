package store

import "encoding/binary"

// ReadUvarint reads an unsigned varint, as binary.AppendUvarint writes it,
// from the front of s and returns its value and the rest of s. It
// accepts only the shortest encoding, so that every value has exactly one:
// ok is false when s is cut short, when the value overflows 64 bits, and
// when the varint ends in a zero group (an overlong encoding). Stores
// that encode records in bytes of their own read their lengths with it,
// as the engine reads the result's Head.
func ReadUvarint(s string) (v uint64, rest string, ok bool) {
	var shift uint
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		c := s[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, "", false // overflows 64 bits
			}
			if c == 0 && i > 0 {
				return 0, "", false // overlong: a trailing zero group
			}
			return v | uint64(c)<<shift, s[i+1:], true
		}
		v |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, "", false
}

// ReadChunk reads a byte string written as its length (a uvarint, see
// ReadUvarint) and its bytes from the front of s, and returns it and the
// rest of s. ok is false when the length is malformed or longer than what
// follows.
func ReadChunk(s string) (chunk, rest string, ok bool) {
	n, rest, ok := ReadUvarint(s)
	if !ok || n > uint64(len(rest)) {
		return "", "", false
	}
	return rest[:n], rest[n:], true
}
