package idem

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"net/http"
	"strconv"
	"sync"
)

// Fingerprint returns a fingerprint of three parts: the lowercase hex
// SHA-256 of the method, the target and the body. Each part is
// length-prefixed, so moving bytes between parts changes the fingerprint.
// The HTTP middleware's default is Fingerprint(r.Method,
// r.URL.RequestURI(), body); Engine.Do callers pass what identifies their
// operation.
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

// hasher is a pooled SHA-256 with scratch space, so fingerprinting a
// request allocates only its result.
type hasher struct {
	h   hash.Hash
	buf []byte
	sum [sha256.Size]byte
	hex [2 * sha256.Size]byte
}

var hashPool = sync.Pool{New: func() any { return &hasher{h: sha256.New(), buf: make([]byte, 0, 512)} }}

func fingerprintRequest(r *http.Request, body []byte) string {
	hs := hashPool.Get().(*hasher)
	hs.h.Reset()
	u := r.URL
	target := hs.buf[:0]
	if u.Opaque != "" {
		target = append(target, u.RequestURI()...)
	} else {
		target = append(target, u.EscapedPath()...)
		if len(target) == 0 {
			target = append(target, '/')
		}
		if u.ForceQuery || u.RawQuery != "" {
			target = append(target, '?')
			target = append(target, u.RawQuery...)
		}
	}
	hs.buf = target
	b := hs.buf[len(target):]
	b = appendPart(b, r.Method)
	b = strconv.AppendInt(b, int64(len(target)), 10)
	b = append(b, ':')
	hs.h.Write(b)
	hs.h.Write(target)
	b = strconv.AppendInt(b[:0], int64(len(body)), 10)
	b = append(b, ':')
	hs.h.Write(b)
	hs.h.Write(body)
	hex.Encode(hs.hex[:], hs.h.Sum(hs.sum[:0]))
	s := string(hs.hex[:])
	if cap(hs.buf) <= 4096 {
		hashPool.Put(hs)
	}
	return s
}

func newToken() string {
	var b [16]byte
	var h [32]byte
	_, _ = rand.Read(b[:])
	hex.Encode(h[:], b[:])
	return string(h[:])
}
