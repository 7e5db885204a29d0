package idem

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/idemkit/idem/core/store"
)

// This file is encryption at rest (WithEncryption): the engine seals what
// it stores and opens what it replays, once, for every store and
// transport.

// EncryptionKey is one key of the ring WithEncryption takes: an ID, stored
// with every record it seals, and a secret of 32 random bytes.
type EncryptionKey struct {
	ID     string // 1 to 32 characters: letters, digits, '-' and '_'
	Secret []byte // 32 bytes, from crypto/rand
}

// ErrUndecryptable means a stored result is sealed (WithEncryption) and
// this engine cannot open it: its key is not in the ring, or the record
// was altered or moved to another key. Nothing is replayed and nothing
// runs again; the error wraps ErrCorruptRecord.
var ErrUndecryptable = fmt.Errorf("%w: the stored result cannot be decrypted", ErrCorruptRecord)

// HeaderSealed marks a stored response that WithEncryption sealed; its
// value is the ID of the key that sealed it. It never reaches a client.
const HeaderSealed = "Idem-Sealed"

// WithEncryption seals every stored result with AES-256-GCM under a key
// ring: keys holds every key that can read (open) records, and the last
// one writes (seals) them, so a key rotates by adding a new last key and
// dropping the old one once the records it sealed have expired. With
// several instances, rotate in two deploys: first add the new key before
// the last one, so that every instance can read what it will seal, then
// make it the last. An instance that lacks the writing key answers its
// records with 500 (undecryptable) and their retries with 422 meanwhile.
//
// The status stays readable (the stores and the exactly-once transaction
// need it); the headers and the body (or Do's value) are sealed, bound to
// the record's scope, key and status, so a ciphertext copied to another
// record does not open. Fingerprints become HMAC-SHA-256 under the
// writing key, so the store cannot confirm a guessed request. A record
// that does not open gets a 500 (problem "record-unreadable",
// ErrUndecryptable for Start and Do, outcome undecryptable), never a
// replay and never a second run. Records stored before encryption was on
// keep replaying. The admin handler shows sealed records' sizes only.
// Default: off.
func WithEncryption(keys ...EncryptionKey) Option {
	return func(c *config) error {
		r, err := newKeyRing(keys)
		if err != nil {
			return err
		}
		c.ring = r
		return nil
	}
}

// ParseEncryptionKeys reads a key ring, one key a line as ID:BASE64 (the
// 32-byte secret in standard base64); blank lines and lines starting with
// # are skipped. The last key writes. Errors name the line.
func ParseEncryptionKeys(r io.Reader) ([]EncryptionKey, error) {
	var keys []EncryptionKey
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, b64, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("line %d: want ID:BASE64, found no colon", n)
		}
		secret, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if err != nil {
			return nil, fmt.Errorf("line %d: key %q: the secret is not standard base64: %v", n, id, err)
		}
		keys = append(keys, EncryptionKey{ID: strings.TrimSpace(id), Secret: secret})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no keys: want one ID:BASE64 line at least")
	}
	if _, err := newKeyRing(keys); err != nil {
		return nil, err
	}
	return keys, nil
}

// keyRing is WithEncryption's keys, derived for their two uses.
type keyRing struct {
	keys   map[string]*ringKey
	writer *ringKey
}

type ringKey struct {
	id   string
	aead cipher.AEAD
	macs sync.Pool // HMAC-SHA-256 under the key's fingerprint key
}

func newKeyRing(keys []EncryptionKey) (*keyRing, error) {
	if len(keys) == 0 {
		return nil, badOption("WithEncryption needs a key")
	}
	r := &keyRing{keys: make(map[string]*ringKey, len(keys))}
	for _, k := range keys {
		if !validKeyID(k.ID) {
			return nil, badOption("encryption key ID %q: want 1 to 32 letters, digits, '-' or '_'", k.ID)
		}
		if len(k.Secret) != 32 {
			return nil, badOption("encryption key %q: the secret is %d bytes, want 32 (AES-256)", k.ID, len(k.Secret))
		}
		if r.keys[k.ID] != nil {
			return nil, badOption("encryption key ID %q is given twice", k.ID)
		}
		rk, err := deriveKey(k)
		if err != nil {
			return nil, err
		}
		r.keys[k.ID], r.writer = rk, rk
	}
	return r, nil
}

func deriveKey(k EncryptionKey) (*ringKey, error) {
	rec, err := hkdf.Key(sha256.New, k.Secret, nil, "idem/v1 record", 32)
	if err != nil {
		return nil, err
	}
	fp, err := hkdf.Key(sha256.New, k.Secret, nil, "idem/v1 fingerprint", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(rec)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	rk := &ringKey{id: k.ID, aead: aead}
	rk.macs.New = func() any { return hmac.New(sha256.New, fp) }
	return rk, nil
}

func validKeyID(id string) bool {
	if id == "" || len(id) > 32 {
		return false
	}
	for _, c := range []byte(id) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// fingerprint returns fp keyed under k: "ID.HMAC", in one allocation.
func (k *ringKey) fingerprint(fp string) string {
	m := k.macs.Get().(hash.Hash)
	m.Reset()
	_, _ = io.WriteString(m, fp)
	var sum [sha256.Size]byte
	var hx [2 * sha256.Size]byte
	hex.Encode(hx[:], m.Sum(sum[:0]))
	k.macs.Put(m)
	var b strings.Builder
	b.Grow(len(k.id) + 1 + len(hx))
	b.WriteString(k.id)
	b.WriteByte('.')
	b.Write(hx[:])
	return b.String()
}

// keyFingerprint returns the fingerprint f stores and compares: raw, or
// keyed under the writing key with encryption on.
func (e *Engine) keyFingerprint(raw string) string {
	if e.cfg.ring == nil {
		return raw
	}
	return e.cfg.ring.writer.fingerprint(raw)
}

// sameRequest reports whether a stored fingerprint is this flight's: the
// same string; with encryption on, the raw fingerprint of a record stored
// before it was on; or, after a rotation, the raw fingerprint keyed under
// the older key the stored one names.
func (f *flight) sameRequest(stored string) bool {
	if stored == f.fp {
		return true
	}
	r := f.e.cfg.ring
	if r == nil {
		return false
	}
	if stored == f.rawFP {
		return true
	}
	id, _, ok := strings.Cut(stored, ".")
	k := r.keys[id]
	return ok && k != nil && k != r.writer && hmac.Equal([]byte(k.fingerprint(f.rawFP)), []byte(stored))
}

// aad binds a sealed result to its record: scope, key and status, and,
// for what Do stores, the kind of result (a value or a final error), so
// that one cannot pass for the other. An HTTP result's has no kind byte,
// as before results had kinds.
func aad(scope, key string, status int, kind resultKind) []byte {
	b := make([]byte, 0, 16+len(scope)+len(key))
	b = append(b, "idem/v1"...)
	b = binary.AppendUvarint(b, uint64(len(scope)))
	b = append(b, scope...)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(status))
	if kind != kindHTTP {
		b = append(b, byte(kind))
	}
	return b
}

// seal returns resp as the store keeps it with encryption on: the status,
// the key ID in HeaderSealed, and the sealed headers, omitted flag and
// body in Body.
func (e *Engine) seal(scope, key string, resp Response) Response {
	r := e.cfg.ring
	if r == nil {
		return resp
	}
	k := r.writer
	// One buffer: the nonce, then the plaintext, sealed in place.
	hdr := AppendHeader(nil, resp.Header)
	ns := k.aead.NonceSize()
	buf := make([]byte, ns, ns+binary.MaxVarintLen64+len(hdr)+1+len(resp.Body)+k.aead.Overhead())
	_, _ = rand.Read(buf)
	buf = binary.AppendUvarint(buf, uint64(len(hdr)))
	buf = append(buf, hdr...)
	flags := byte(0)
	if resp.BodyOmitted {
		flags = 1
	}
	buf = append(buf, flags)
	buf = append(buf, resp.Body...)
	sealed := k.aead.Seal(buf[:ns], buf[:ns], buf[ns:], aad(scope, key, resp.Status, resp.kind))
	return Response{
		Status: resp.Status,
		kind:   resp.kind,
		Header: http.Header{HeaderSealed: {k.id}},
		Body:   sealed,
	}
}

// unknownSeal returns an error wrapping ErrUndecryptable when rec is a
// completed record sealed under a key the engine does not hold.
func (e *Engine) unknownSeal(rec *record) error {
	if rec.State != store.Completed || rec.Response == nil {
		return nil
	}
	ids := rec.Response.Header[HeaderSealed]
	switch {
	case ids == nil:
		return nil
	case e.cfg.ring == nil:
		return fmt.Errorf("%w: it is sealed with key %q, and the engine has no encryption keys (WithEncryption)", ErrUndecryptable, ids[0])
	case e.cfg.ring.keys[ids[0]] == nil:
		return fmt.Errorf("%w: it is sealed with key %q, which is not in the engine's ring", ErrUndecryptable, ids[0])
	}
	return nil
}

// open returns the response a stored one holds: itself when it is not
// sealed, else what seal sealed. A sealed response whose body a store
// dropped (a size bound) opens as its status alone, body omitted.
func (e *Engine) open(scope, key string, stored *Response) (*Response, error) {
	ids := stored.Header[HeaderSealed]
	if ids == nil {
		return stored, nil
	}
	if len(stored.Body) == 0 && stored.BodyOmitted {
		return &Response{Status: stored.Status, kind: stored.kind, BodyOmitted: true}, nil
	}
	if err := e.unknownSeal(&record{State: store.Completed, Response: stored}); err != nil {
		return nil, err
	}
	k := e.cfg.ring.keys[ids[0]]
	ns := k.aead.NonceSize()
	if len(stored.Body) < ns {
		return nil, fmt.Errorf("%w: the sealed body is %d bytes", ErrUndecryptable, len(stored.Body))
	}
	plain, err := k.aead.Open(nil, stored.Body[:ns], stored.Body[ns:], aad(scope, key, stored.Status, stored.kind))
	if err != nil {
		return nil, fmt.Errorf("%w: key %q does not open it (altered, or moved from another record)", ErrUndecryptable, ids[0])
	}
	n, m := binary.Uvarint(plain)
	if m <= 0 || n >= uint64(len(plain)-m) {
		return nil, fmt.Errorf("%w: the sealed result is malformed", ErrUndecryptable)
	}
	hdr, rest := plain[m:m+int(n)], plain[m+int(n):]
	resp := &Response{Status: stored.Status, kind: stored.kind, BodyOmitted: rest[0]&1 != 0}
	if len(rest) > 1 {
		resp.Body = rest[1:]
	}
	if resp.Header, err = ParseHeader(hdr); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUndecryptable, err)
	}
	return resp, nil
}
