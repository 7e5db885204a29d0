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

func writeFingerprint(h hash.Hash, method, target string, body []byte) {
	var n [20]byte
	h.Write(strconv.AppendInt(n[:0], int64(len(method)), 10))
	h.Write([]byte{':'})
	h.Write([]byte(method))
	h.Write(strconv.AppendInt(n[:0], int64(len(target)), 10))
	h.Write([]byte{':'})
	h.Write([]byte(target))
	h.Write(strconv.AppendInt(n[:0], int64(len(body)), 10))
	h.Write([]byte{':'})
	h.Write(body)
}
