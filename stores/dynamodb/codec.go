package dynamostore

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/idemkit/idem/core/store"
)

// recordID returns the id of the record for (scope, key): 32 hex digits of
// a SHA-256 over the scope's length, the scope and the key, so that no two
// (scope, key) pairs share an id and any bytes may be in the scope.
func recordID(scope, key string) string {
	var buf [256]byte
	in := strconv.AppendInt(buf[:0], int64(len(scope)), 10)
	in = append(in, ':')
	in = append(in, scope...)
	in = append(in, key...)
	sum := sha256.Sum256(in)
	return hex.EncodeToString(sum[:16])
}

// The stored state numbers, as store.State.
const (
	stateInProgress = "1"
	stateCompleted  = "2"
	codingGzip      = "gzip"
)

func attrS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func attrB(b []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: b} }
func attrN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}

// nanos returns t as Unix nanoseconds, or an error when t is outside the
// years 1678 to 2262 that they can hold.
func nanos(t time.Time) (int64, error) {
	if t.Year() < 1678 || t.Year() > 2261 {
		return 0, fmt.Errorf("time %v is outside the years 1678 to 2261 the store can keep", t)
	}
	return t.UnixNano(), nil
}

// ceilSec returns t in Unix seconds, rounded up.
func ceilSec(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// keepUntil is how long a store keeps an in-progress record: its lease
// end plus as long again as the lease has lasted since created.
func keepUntil(created, leaseEnd time.Time) time.Time {
	if !leaseEnd.After(created) {
		return leaseEnd
	}
	return leaseEnd.Add(leaseEnd.Sub(created))
}

// twiceSec returns 2 × leaseEnd in Unix seconds, rounded up: the TTL of an
// extended claim is that minus its created_s (which is rounded down), at
// least leaseEnd + (leaseEnd − CreatedAt).
func twiceSec(leaseEnd time.Time) int64 {
	s := 2 * leaseEnd.Unix()
	if ns := 2 * int64(leaseEnd.Nanosecond()); ns > 0 {
		s += (ns + int64(time.Second) - 1) / int64(time.Second)
	}
	return s
}

// encoded is a result as a completion writes it.
type encoded struct {
	head, body         []byte
	chunks             [][]byte // the body, in chunk items, when it does not fit in the record
	headGzip, bodyGzip bool
	omitted            bool
	level              int // which of the levels below produced it
}

// The encoding levels, tried in order until the result fits. The head is
// always kept: it is at most store.MaxHead, which an item always has room
// for.
const (
	levelRaw      = iota // head and body in the record (the body gzipped above WithCompressAbove when smaller)
	levelGzipBody        // the body gzipped, in the record
	levelChunks          // the body (gzipped when smaller) in chunk items written with the record
	levelOmitBody        // the head alone, BodyOmitted
	levelGzipHead        // the head gzipped (when smaller) alone, BodyOmitted, even past the budget
	levelCount
)

// limits bounds an encoding: budget is what the record's head and body
// may take, chunkSize what one chunk item's body may, maxChunks how many
// chunk items the transaction has room for, and maxChunked their total
// size.
type limits struct {
	budget, chunkSize, maxChunks, maxChunked, compressAt int
}

// encodeResult encodes res at the first level from minLevel on that fits
// within lim; the last level, the head alone, is returned even when it
// does not fit the budget (a head larger than what WithMaxItemSize leaves
// is written anyway: DynamoDB's 400 KB have room for it).
func encodeResult(res *store.Result, lim limits, minLevel int) encoded {
	h := res.Head
	body := res.Body
	if res.BodyOmitted {
		body = nil
	}
	var gz []byte // body gzipped, once needed; nil when that is not smaller
	gzipBody := func() []byte {
		if gz == nil && len(body) > 0 {
			if g := gzipped(body); len(g) < len(body) {
				gz = g
			}
		}
		return gz
	}
	for level := max(minLevel, levelRaw); level < levelGzipHead; level++ {
		e := encoded{head: h, body: body, omitted: res.BodyOmitted, level: level}
		switch level {
		case levelRaw:
			if lim.compressAt > 0 && len(body) > lim.compressAt {
				if g := gzipBody(); g != nil {
					e.body, e.bodyGzip = g, true
				}
			}
		case levelGzipBody:
			g := gzipBody()
			if g == nil {
				continue
			}
			e.body, e.bodyGzip = g, true
		case levelChunks:
			if g := gzipBody(); g != nil {
				e.body, e.bodyGzip = g, true
			}
			n := (len(e.body) + lim.chunkSize - 1) / lim.chunkSize
			if n < 2 || n > lim.maxChunks || len(e.body) > lim.maxChunked || len(h) > lim.budget {
				continue
			}
			for b := e.body; len(b) > 0; b = b[min(len(b), lim.chunkSize):] {
				e.chunks = append(e.chunks, b[:min(len(b), lim.chunkSize)])
			}
			e.body = nil
			return e
		case levelOmitBody:
			e.body, e.omitted = nil, true
		}
		if len(e.head)+len(e.body) <= lim.budget {
			return e
		}
	}
	e := encoded{head: h, omitted: true, level: levelGzipHead}
	if g := gzipped(h); len(g) < len(h) {
		e.head, e.headGzip = g, true
	}
	return e
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	buf.Grow(len(b)/2 + 64)
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	zw.Write(b) //nolint:errcheck // a bytes.Buffer does not fail
	zw.Close()  //nolint:errcheck
	return buf.Bytes()
}

// maxInflated bounds what a gzipped attribute may inflate to: far above
// any response the engine buffers, so only a corrupt item reaches it.
const maxInflated = 1 << 30

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	out, err := io.ReadAll(io.LimitReader(zr, maxInflated+1))
	if err != nil {
		return nil, err
	}
	if len(out) > maxInflated {
		return nil, fmt.Errorf("inflates past %d bytes", maxInflated)
	}
	return out, nil
}

// chunked says where a completed record's body is when chunk items hold
// it: n items keyed by the record's key and token (see chunkKey).
type chunked struct {
	token []byte
	n     int
	gzip  bool
}

// decodeRecord turns an item into a record, with the body left out when
// chunk items hold it; errors wrap store.ErrCorruptRecord. A completed
// item with a status was written before results were opaque: its header
// attribute holds the legacy header bytes, and its head is
// store.LegacyHead of both.
func (s *Store) decodeRecord(item map[string]types.AttributeValue) (store.Record, chunked, error) {
	a := &s.attrs
	d := decoder{item: item}
	var rec store.Record
	var ch chunked
	rec.Fingerprint = string(d.bytes(a.Fingerprint, true))
	state := d.num(a.State, true)
	rec.State = store.State(min(max(state, 0), math.MaxUint8))
	if state != int64(rec.State) {
		rec.State = 0
	}
	rec.CreatedAt = d.time(a.CreatedAt, true)
	rec.ExpiresAt = d.time(a.ExpiresAt, true)
	if rec.State == store.InProgress {
		rec.LeaseEnd = d.time(a.LeaseEnd, true)
	}
	if rec.State == store.Completed {
		res := &rec.Result
		res.Head = d.coded(a.Header, a.HeaderCoding)
		if _, legacy := item[a.Status]; legacy {
			res.Head = store.LegacyHead(int(d.num(a.Status, true)), res.Head)
		}
		if n := d.num(a.BodyChunks, false); n != 0 {
			if n < 0 || n > 100 {
				d.fail(a.BodyChunks, fmt.Sprintf("%d chunks, want 1 to 100", n))
			}
			ch = chunked{token: d.bytes(a.Token, true), n: int(n)}
			switch c := d.str(a.BodyCoding); c {
			case "":
			case codingGzip:
				ch.gzip = true
			default:
				d.fail(a.BodyCoding, fmt.Sprintf("unknown coding %q", c))
			}
		} else {
			res.Body = d.coded(a.Body, a.BodyCoding)
		}
		res.BodyOmitted = d.boolean(a.BodyOmitted)
	}
	if d.err != nil {
		return store.Record{}, chunked{}, fmt.Errorf("%w: %w", store.ErrCorruptRecord, d.err)
	}
	if err := rec.Check(); err != nil {
		return store.Record{}, chunked{}, err
	}
	return rec, ch, nil
}

// heldBy reports whether item is a record in progress that holds token,
// which is not empty.
func (s *Store) heldBy(item map[string]types.AttributeValue, token string) bool {
	st, _ := item[s.attrs.State].(*types.AttributeValueMemberN)
	tok, _ := item[s.attrs.Token].(*types.AttributeValueMemberB)
	return token != "" && st != nil && st.Value == stateInProgress && tok != nil && string(tok.Value) == token
}

// decoder reads attributes of one item, keeping the first error.
type decoder struct {
	item map[string]types.AttributeValue
	err  error
}

func (d *decoder) fail(name, why string) {
	if d.err == nil {
		d.err = fmt.Errorf("attribute %q: %s", name, why)
	}
}

func (d *decoder) bytes(name string, required bool) []byte {
	switch v := d.item[name].(type) {
	case *types.AttributeValueMemberB:
		return v.Value
	case nil:
		if required {
			d.fail(name, "missing")
		}
	default:
		d.fail(name, fmt.Sprintf("a %T, want binary (B)", v))
	}
	return nil
}

func (d *decoder) str(name string) string {
	switch v := d.item[name].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case nil:
	default:
		d.fail(name, fmt.Sprintf("a %T, want a string (S)", v))
	}
	return ""
}

func (d *decoder) num(name string, required bool) int64 {
	switch v := d.item[name].(type) {
	case *types.AttributeValueMemberN:
		n, err := strconv.ParseInt(v.Value, 10, 64)
		if err != nil {
			d.fail(name, fmt.Sprintf("%q is not an integer", v.Value))
		}
		return n
	case nil:
		if required {
			d.fail(name, "missing")
		}
	default:
		d.fail(name, fmt.Sprintf("a %T, want a number (N)", v))
	}
	return 0
}

func (d *decoder) time(name string, required bool) time.Time {
	n := d.num(name, required)
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (d *decoder) boolean(name string) bool {
	switch v := d.item[name].(type) {
	case *types.AttributeValueMemberBOOL:
		return v.Value
	case nil:
	default:
		d.fail(name, fmt.Sprintf("a %T, want a boolean (BOOL)", v))
	}
	return false
}

// coded reads a B attribute that the S attribute coding may mark gzip.
func (d *decoder) coded(name, coding string) []byte {
	b := d.bytes(name, false)
	switch c := d.str(coding); c {
	case "":
		return b
	case codingGzip:
		out, err := gunzip(b)
		if err != nil {
			d.fail(name, "bad gzip data: "+err.Error())
		}
		return out
	default:
		d.fail(coding, fmt.Sprintf("unknown coding %q", c))
		return nil
	}
}
