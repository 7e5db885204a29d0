package idemclient

import (
	"crypto/rand"
	"encoding/hex"
)

// NewKey returns a new random key: a version 4 UUID in its text form, such
// as "3f2a9c1e-7b4d-4e0a-9c1f-5d6e7f8a9b0c", from 128 bits of crypto/rand
// (122 of them random; the other 6 mark the version and variant). It is
// the transport's default key.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])  // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
