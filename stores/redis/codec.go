package redisstore

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/idemkit/idem/core/store"
)

// recordKey returns the Redis key of the record for (scope, key) and the
// record's id, the 32 hex digits of the key's hash tag:
//
//	prefix + "{" + hex(SHA-256(len(scope) ":" scope key))[:32] + "}"
//
// The length prefix makes the encoding unambiguous: ("a", "bc") and
// ("ab", "c") hash different inputs. 128 bits of the hash leave no
// practical chance of two pairs sharing a key. The id is also the payload
// of notifications.
func recordKey(prefix, scope, key string) (k, id string) {
	var buf [256]byte
	in := strconv.AppendInt(buf[:0], int64(len(scope)), 10)
	in = append(in, ':')
	in = append(in, scope...)
	in = append(in, key...)
	sum := sha256.Sum256(in)
	out := make([]byte, len(prefix)+2+idLen)
	n := copy(out, prefix)
	out[n] = '{'
	hex.Encode(out[n+1:], sum[:idLen/2])
	out[len(out)-1] = '}'
	k = string(out)
	return k, k[n+1 : n+1+idLen]
}

// idLen is the length of a record id in hex digits.
const idLen = 32

// A record is one Redis string. It starts with a fixed-width ASCII header
// that the scripts read with string.sub; the rest is read by Go only.
//
//	offset  size  field
//	0       1     state: '1' in progress, '2' completed
//	1       20    lease end (all zeros once completed)
//	21      20    expires at
//	41      20    created at
//	61      5     token length n, decimal
//	66      n     token (kept once completed, for Evict; records completed
//	              before it was kept hold none, n = 0)
//	66+n          fingerprint: uvarint length, bytes
//	              completed only, the result (store.Result):
//	                format byte: resultFormat (2)
//	                flags byte: flagOmitted
//	                uvarint length, the Head
//	                the Body: every remaining byte
//
// Records completed before results were opaque (legacy records) kept an
// HTTP response where the result is: a uvarint status from 200 to 599,
// whose first byte is 0x80 or more (so it never reads as a format byte);
// a flags byte (flagOmitted, flagHeader, flagBody); with flagHeader a
// uvarint length and the header bytes (the engine's header format, first
// byte 1); and the body, every remaining byte, when flagBody is set. They
// are read with store.LegacyHead and never written any more. The scripts
// read neither form: they copy the fixed header and append what Go
// encodes.
//
// The body has no length of its own: Redis writes a string whole, so only
// damage from outside (a SETRANGE, a tool that cuts values) could shorten
// one, and a record cut inside its body would read as a shorter body
// (cut anywhere before, it is refused as corrupt). Adding a length would
// take a new format byte, which releases before it report corrupt: their
// instances would answer 503 to the retries of every record completed by
// a newer one during a rolling upgrade, and after a rollback for as long
// as those records are kept. The format is left as it is.
//
// Times are the engine's Unix nanoseconds with the sign bit flipped, as 20
// zero-padded decimal digits, so that comparing two of them as strings
// compares the times: Lua numbers are doubles and cannot hold nanoseconds
// since 1970 exactly. A later format can use other state bytes.
const (
	offLease   = 1
	offExpires = 21
	offCreated = 41
	offTokLen  = 61
	offToken   = 66
	timeLen    = 20
	tokLenLen  = 5
	maxToken   = 99999
)

// resultFormat is the first byte of a completed record's result; it
// counts the result encodings this package has written (the legacy one,
// which starts with a status, being the first). A later encoding takes
// another byte below 0x80.
const resultFormat = 2

// Result flags. A result sets only flagOmitted; legacy records used all
// three.
const (
	flagOmitted = 1 << iota
	flagHeader
	flagBody
)

// The times a record can hold: those whose Unix time in nanoseconds fits
// an int64, from 1677-09-21 to 2262-04-11.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// errTimeRange is wrapped by the error for a time a record cannot hold.
var errTimeRange = errors.New("outside the range a record can hold")

// appendTime appends t in the header's time encoding. It fails for a time
// outside minTime to maxTime, whose UnixNano would overflow.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	if t.Before(minTime) || t.After(maxTime) {
		return b, fmt.Errorf("time %v is %w (%v to %v)", t, errTimeRange, minTime.UTC(), maxTime.UTC())
	}
	u := uint64(t.UnixNano()) ^ (1 << 63)
	var d [timeLen]byte
	for i := timeLen - 1; i >= 0; i-- {
		d[i] = byte('0' + u%10)
		u /= 10
	}
	return append(b, d[:]...), nil
}

// formatTime returns t in the header's time encoding.
func formatTime(t time.Time) (string, error) {
	b, err := appendTime(make([]byte, 0, timeLen), t)
	return string(b), err
}

// formatTimes returns each of ts in the header's time encoding, or the
// first error.
func formatTimes(ts ...time.Time) ([]string, error) {
	out := make([]string, len(ts))
	for i, t := range ts {
		var err error
		if out[i], err = formatTime(t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func parseTime(s string) (time.Time, error) {
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil || len(s) != timeLen {
		return time.Time{}, fmt.Errorf("bad time %q", s)
	}
	return time.Unix(0, int64(u^(1<<63))), nil
}

// newClaimRecord encodes the in-progress record a claim leaves. It fails
// when a time is out of range or the token too long.
func newClaimRecord(c *store.Claim) (string, error) {
	if len(c.Token) > maxToken {
		return "", fmt.Errorf("the token is %d bytes, more than %d", len(c.Token), maxToken)
	}
	b := make([]byte, 0, offToken+len(c.Token)+binary.MaxVarintLen64+len(c.Fingerprint))
	b = append(b, '1')
	var err error
	for _, t := range [...]time.Time{c.LeaseEnd, c.LeaseEnd, c.Now} {
		if b, err = appendTime(b, t); err != nil {
			return "", err
		}
	}
	b = fmt.Appendf(b, "%05d", len(c.Token))
	b = append(b, c.Token...)
	b = binary.AppendUvarint(b, uint64(len(c.Fingerprint)))
	b = append(b, c.Fingerprint...)
	return string(b), nil
}

// heldBy reports whether v, a record as Redis returns it, is in progress
// and holds token, which is not empty.
func heldBy(v, token string) bool {
	if token == "" || len(v) < offToken || v[0] != '1' {
		return false
	}
	n, err := strconv.ParseUint(v[offTokLen:offToken], 10, 32)
	return err == nil && offToken+int(n) <= len(v) && v[offToken:offToken+int(n)] == token
}

// encodeResultHead encodes the result up to its body, which the complete
// script appends.
func encodeResultHead(res *store.Result) []byte {
	var flags byte
	if res.BodyOmitted {
		flags |= flagOmitted
	}
	b := make([]byte, 0, 2+binary.MaxVarintLen64+len(res.Head))
	b = append(b, resultFormat, flags)
	b = binary.AppendUvarint(b, uint64(len(res.Head)))
	return append(b, res.Head...)
}

// maxTTLMillis is the longest TTL the Store sets, about 292 years: the
// longest time.Duration in whole milliseconds, so the TTL converts back to
// a Duration (as go-redis does) without overflowing.
const maxTTLMillis = int64(math.MaxInt64 / int64(time.Millisecond))

// ttlMillis returns the Redis TTL, in whole milliseconds rounded up, for a
// key that must live from now until end on the engine's clock. Rounding up
// means Redis never drops a record before the engine considers it expired;
// the scripts compare against the engine's now for the exact cut-off. The
// TTL is at least 1 and saturates at maxTTLMillis.
func ttlMillis(now, end time.Time) int64 {
	d := end.Sub(now) // saturates at the longest Duration
	if d <= 0 {
		return 1
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return min(ms, maxTTLMillis)
}

// keepUntil returns how long Redis keeps an in-progress record claimed at
// created whose lease ends at leaseEnd: LeaseEnd + (LeaseEnd - CreatedAt),
// a lease past its end, so that a Complete or Extend that comes late still
// finds it (the extend script computes the same from the record).
func keepUntil(created, leaseEnd time.Time) time.Time {
	if !leaseEnd.After(created) {
		return leaseEnd
	}
	return leaseEnd.Add(leaseEnd.Sub(created)) // Sub saturates; Add does not wrap
}

// completedLease is what a completed record holds in place of the lease
// end.
const completedLease = "00000000000000000000"

// decodeRecord decodes a record as the claim script or GET returns it. It
// accepts only what this package writes or wrote: state 1 or 2; for a
// completed record no lease end and either a result in the current format
// or a legacy response (see the layout above), with known flags; no bytes
// after an in-progress record's fingerprint.
// Its errors wrap store.ErrCorruptRecord.
func decodeRecord(v string) (store.Record, error) {
	var rec store.Record
	if len(v) < offToken {
		return rec, corrupt("%d bytes, shorter than the header", len(v))
	}
	switch v[0] {
	case '1':
		rec.State = store.InProgress
	case '2':
		rec.State = store.Completed
	default:
		return rec, corrupt("state byte %q", v[0])
	}
	var err error
	if rec.ExpiresAt, err = parseTime(v[offExpires : offExpires+timeLen]); err != nil {
		return rec, corrupt("%v", err)
	}
	if rec.CreatedAt, err = parseTime(v[offCreated : offCreated+timeLen]); err != nil {
		return rec, corrupt("%v", err)
	}
	if rec.State == store.InProgress {
		if rec.LeaseEnd, err = parseTime(v[offLease : offLease+timeLen]); err != nil {
			return rec, corrupt("%v", err)
		}
	} else if v[offLease:offLease+timeLen] != completedLease {
		return rec, corrupt("completed with a lease end")
	}
	n, err := strconv.ParseUint(v[offTokLen:offTokLen+tokLenLen], 10, 32)
	if err != nil || offToken+int(n) > len(v) {
		return rec, corrupt("bad token length %q", v[offTokLen:offTokLen+tokLenLen])
	}
	rest := v[offToken+int(n):]
	var ok bool
	if rec.Fingerprint, rest, ok = store.ReadChunk(rest); !ok {
		return rec, corrupt("bad fingerprint")
	}
	if rec.State == store.InProgress {
		if rest != "" {
			return rec, corrupt("bytes after an in-progress record")
		}
		return rec, rec.Check()
	}
	switch {
	case rest == "":
		return rec, corrupt("completed without a result")
	case rest[0] == resultFormat:
		rec.Result, err = decodeResult(rest[1:])
	case rest[0] >= 0x80:
		rec.Result, err = decodeLegacy(rest)
	default:
		return rec, corrupt("unknown result format %#x", rest[0])
	}
	if err != nil {
		return rec, err
	}
	return rec, rec.Check()
}

// decodeResult decodes a result after its format byte.
func decodeResult(s string) (store.Result, error) {
	var res store.Result
	if s == "" {
		return res, corrupt("no result flags")
	}
	flags := s[0]
	if flags&^flagOmitted != 0 {
		return res, corrupt("unknown result flags %#x", flags)
	}
	res.BodyOmitted = flags&flagOmitted != 0
	head, rest, ok := store.ReadChunk(s[1:])
	if !ok {
		return res, corrupt("bad head length")
	}
	res.Head = []byte(head)
	if rest != "" {
		res.Body = []byte(rest)
	}
	return res, nil
}

// decodeLegacy decodes the response of a legacy record into a result
// whose Head store.LegacyHead builds. The engine checks the status and
// the header bytes, as it checks any Head.
func decodeLegacy(s string) (store.Result, error) {
	var res store.Result
	status, rest, ok := store.ReadUvarint(s)
	if !ok || status > math.MaxInt32 {
		return res, corrupt("bad legacy response status")
	}
	if rest == "" {
		return res, corrupt("no legacy response flags")
	}
	flags := rest[0]
	rest = rest[1:]
	if flags&^(flagOmitted|flagHeader|flagBody) != 0 {
		return res, corrupt("unknown legacy response flags %#x", flags)
	}
	res.BodyOmitted = flags&flagOmitted != 0
	var h string
	if flags&flagHeader != 0 {
		if h, rest, ok = store.ReadChunk(rest); !ok {
			return res, corrupt("bad legacy header length")
		}
		if h == "" {
			return res, corrupt("empty legacy header bytes")
		}
	}
	if flags&flagBody != 0 {
		res.Body = []byte(rest)
	} else if rest != "" {
		return res, corrupt("bytes after a nil body")
	}
	res.Head = store.LegacyHead(int(status), []byte(h))
	return res, nil
}

// corrupt returns an error wrapping store.ErrCorruptRecord.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{store.ErrCorruptRecord}, args...)...)
}
