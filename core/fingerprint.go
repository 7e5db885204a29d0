package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
)

// Fingerprint returns the default request fingerprint: the lowercase hex
// SHA-256 of the method, the path with its query (the request-target, as
// in r.URL.RequestURI()) and the body. Each part is length-prefixed, so
// moving bytes between parts changes the fingerprint.
func Fingerprint(method, pathAndQuery string, body []byte) string {
	h := sha256.New()
	writeFingerprint(h, method, pathAndQuery, body)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// writeFingerprint feeds the fingerprint's encoding of the three parts to
// h: each part prefixed by its length in decimal and a colon.
func writeFingerprint(h hash.Hash, method, target string, body []byte) {
	b := make([]byte, 0, 64+len(method)+len(target))
	b = appendPart(b, method)
	b = appendPart(b, target)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, ':')
	h.Write(b)
	h.Write(body)
}
