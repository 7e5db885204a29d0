package dynamostore

import (
	"errors"
	"fmt"
	"unicode/utf8"

	idem "github.com/idemkit/idem/core"
)

// Errors of this package. Errors from DynamoDB itself are returned
// wrapped, with the failing operation named; callers test with errors.Is
// and errors.As (for the SDK's types).
var (
	// ErrBadOption is wrapped by the error New returns for an option value
	// it cannot use. It wraps idem.ErrBadOption.
	ErrBadOption error = badOption{}
	// ErrTxFull is returned by the TxWriter methods once a request has
	// collected MaxTxItems writes: DynamoDB takes at most 100 items in one
	// TransactWriteItems, and the record's completion is one of them.
	ErrTxFull = errors.New("dynamostore: transaction full: at most 99 handler writes per request (DynamoDB's limit of 100 items, one of them the idempotency record)")
	// ErrTxDone is returned by the TxWriter methods after the engine
	// committed or rolled back the request's transaction.
	ErrTxDone = errors.New("dynamostore: transaction already committed or rolled back")
	// ErrTxConflict is wrapped by the error Commit returns when a
	// condition of one of the handler's own writes failed: nothing was
	// written, the engine answers 503 and releases the key.
	ErrTxConflict = errors.New("dynamostore: a condition of the handler's writes failed")
)

// badOption is ErrBadOption's type: its text names this package, and it
// unwraps to idem.ErrBadOption.
type badOption struct{}

func (badOption) Error() string { return "dynamostore: bad option" }
func (badOption) Unwrap() error { return idem.ErrBadOption }

// DefaultTable is the table name used when WithTable is not given.
const DefaultTable = "idempotency_keys"

// DefaultPartitionKey is the partition key attribute used when
// WithPartitionKey is not given.
const DefaultPartitionKey = "pk"

// Attributes names the item attributes a Store writes besides the
// table's keys. A field left empty keeps its default, given in its
// comment. Names must be unique, differ from the key attributes, and be
// 1 to 255 bytes of UTF-8.
//
// Status is legacy: the Store no longer writes it, but reads it from
// items completed before results were opaque (an HTTP status, with
// the header bytes in Header), and removes it when it completes a record.
// Keep its name as it was while such items may still be read.
type Attributes struct {
	Fingerprint  string // "fingerprint" (B): the request's fingerprint
	Token        string // "token" (B): the claim's token
	State        string // "state" (N): 1 in progress, 2 completed
	CreatedAt    string // "created_at" (N): Unix nanoseconds
	CreatedSec   string // "created_s" (N): CreatedAt in whole Unix seconds, for the TTL of an extended claim
	LeaseEnd     string // "lease_end" (N): Unix nanoseconds; in-progress records only
	ExpiresAt    string // "expires_at" (N): Unix nanoseconds
	TTL          string // "ttl" (N): Unix seconds, DynamoDB's TTL attribute
	Status       string // "status" (N): legacy only, read and never written: the HTTP status of items completed before results were opaque
	Header       string // "headers" (B): the result's Head (in legacy items, with Status: the header bytes), gzip when HeaderCoding says so
	Body         string // "body" (B): the result's Body, gzip when BodyCoding says so
	BodyCoding   string // "body_coding" (S): "gzip" when Body is compressed
	HeaderCoding string // "headers_coding" (S): "gzip" when Header is compressed
	BodyOmitted  string // "body_omitted" (BOOL): the body was not kept
	BodyChunks   string // "body_chunks" (N): how many chunk items hold the body (see "Large results")
}

func defaultAttributes() Attributes {
	return Attributes{
		Fingerprint: "fingerprint", Token: "token", State: "state",
		CreatedAt: "created_at", CreatedSec: "created_s", LeaseEnd: "lease_end",
		ExpiresAt: "expires_at", TTL: "ttl", Status: "status", Header: "headers",
		Body: "body", BodyCoding: "body_coding", HeaderCoding: "headers_coding",
		BodyOmitted: "body_omitted", BodyChunks: "body_chunks",
	}
}

// fields lists the attributes' names with their field names, in order.
func (a *Attributes) fields() []struct{ field, name string } {
	return []struct{ field, name string }{
		{"Fingerprint", a.Fingerprint}, {"Token", a.Token}, {"State", a.State},
		{"CreatedAt", a.CreatedAt}, {"CreatedSec", a.CreatedSec}, {"LeaseEnd", a.LeaseEnd},
		{"ExpiresAt", a.ExpiresAt}, {"TTL", a.TTL}, {"Status", a.Status},
		{"Header", a.Header}, {"Body", a.Body}, {"BodyCoding", a.BodyCoding},
		{"HeaderCoding", a.HeaderCoding}, {"BodyOmitted", a.BodyOmitted},
		{"BodyChunks", a.BodyChunks},
	}
}

// merge fills a's empty fields from d.
func (a Attributes) merge(d Attributes) Attributes {
	set := func(v *string, def string) {
		if *v == "" {
			*v = def
		}
	}
	set(&a.Fingerprint, d.Fingerprint)
	set(&a.Token, d.Token)
	set(&a.State, d.State)
	set(&a.CreatedAt, d.CreatedAt)
	set(&a.CreatedSec, d.CreatedSec)
	set(&a.LeaseEnd, d.LeaseEnd)
	set(&a.ExpiresAt, d.ExpiresAt)
	set(&a.TTL, d.TTL)
	set(&a.Status, d.Status)
	set(&a.Header, d.Header)
	set(&a.Body, d.Body)
	set(&a.BodyCoding, d.BodyCoding)
	set(&a.HeaderCoding, d.HeaderCoding)
	set(&a.BodyOmitted, d.BodyOmitted)
	set(&a.BodyChunks, d.BodyChunks)
	return a
}

// Option configures a Store. Options are applied in order by New; a nil
// Option is ignored.
type Option func(*config)

type config struct {
	table      string
	pk         string
	sk         string // "" when the table has no sort key
	skValue    string // the fixed sort-key value, or its prefix
	skPrefix   bool   // skValue is a prefix the record id follows
	skGiven    int    // how many of WithSortKey, WithSortKeyPrefix were given
	keyPrefix  string
	attrs      Attributes
	maxItem    int
	compressAt int
}

// WithTable sets the table the Store uses. The default is DefaultTable
// ("idempotency_keys"). The name must be 3 to 255 characters of a-z, A-Z,
// 0-9, '_', '-' and '.', or a table ARN.
func WithTable(name string) Option { return func(c *config) { c.table = name } }

// WithPartitionKey sets the name of the table's partition key attribute,
// of type S. The default is DefaultPartitionKey ("pk").
func WithPartitionKey(name string) Option { return func(c *config) { c.pk = name } }

// WithKeyPrefix sets a prefix for the partition key's value, which is
// otherwise the record id (32 hex digits of a SHA-256 of scope and key):
// "IDEM#" gives "IDEM#3f2a…" in a single-table design. At most 1024
// bytes. The default is none.
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.keyPrefix = prefix } }

// WithSortKey declares that the table has a sort key attribute name, of
// type S, and that every record carries the fixed value in it (a
// single-table design's "IDEM", say). The default is a table without a
// sort key. It excludes WithSortKeyPrefix.
func WithSortKey(name, value string) Option {
	return func(c *config) { c.sk, c.skValue, c.skPrefix = name, value, false; c.skGiven++ }
}

// WithSortKeyPrefix declares that the table has a sort key attribute
// name, of type S, which holds prefix followed by the record id, as the
// partition key does. It excludes WithSortKey.
func WithSortKeyPrefix(name, prefix string) Option {
	return func(c *config) { c.sk, c.skValue, c.skPrefix = name, prefix, true; c.skGiven++ }
}

// WithAttributes names the attributes the Store writes besides the keys;
// empty fields keep their defaults (see Attributes).
func WithAttributes(a Attributes) Option { return func(c *config) { c.attrs = a } }

// WithMaxItemSize sets the largest item the Store writes, in bytes, as
// DynamoDB counts them (names and values). The default and the maximum is
// MaxItemSize, DynamoDB's 400 KB; a smaller one keeps write costs down
// (a completion that would be larger is compressed, then stored without
// its body, as the package docs say). At least 8 KiB. The result's head
// is always kept: one too large for the bound, even gzipped, is written
// anyway (a head is at most 64 KiB, store.MaxHead).
func WithMaxItemSize(n int) Option { return func(c *config) { c.maxItem = n } }

// WithCompressAbove makes the Store gzip a result's body larger than n
// bytes whenever that makes it smaller, to save write capacity (a write
// costs one unit per KB). The default, 0, compresses only a result that
// would not fit in an item otherwise. n must not be negative.
func WithCompressAbove(n int) Option { return func(c *config) { c.compressAt = n } }

// MaxItemSize is DynamoDB's limit on an item: 400 KB, names and values.
const MaxItemSize = 400 * 1024

// minItemSize bounds WithMaxItemSize from below: room for the record's
// own attributes and a small head.
const minItemSize = 8 * 1024

func (c *config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadOption}, args...)...)
	}
	switch {
	case !validTable(c.table):
		return bad("WithTable: %q is not a table name (3 to 255 of a-z, A-Z, 0-9, _ - .) or a table ARN", c.table)
	case !validName(c.pk):
		return bad("WithPartitionKey: %q is not an attribute name (1 to 255 bytes of UTF-8)", c.pk)
	case len(c.keyPrefix) > 1024 || !utf8.ValidString(c.keyPrefix):
		return bad("WithKeyPrefix: the prefix must be at most 1024 bytes of UTF-8")
	case c.skGiven > 1:
		return bad("WithSortKey and WithSortKeyPrefix given together (or one twice): a table has one sort key")
	case c.skGiven == 1 && !validName(c.sk):
		return bad("sort key: %q is not an attribute name (1 to 255 bytes of UTF-8)", c.sk)
	case c.skGiven == 1 && c.sk == c.pk:
		return bad("sort key: %q is also the partition key", c.sk)
	case c.skGiven == 1 && (len(c.skValue) > 1024 || !utf8.ValidString(c.skValue) || (!c.skPrefix && c.skValue == "")):
		return bad("sort key: the value must be 1 to 1024 bytes of UTF-8 (a prefix may be empty)")
	case c.maxItem < minItemSize || c.maxItem > MaxItemSize:
		return bad("WithMaxItemSize: %d bytes; want %d to %d", c.maxItem, minItemSize, MaxItemSize)
	case c.compressAt < 0:
		return bad("WithCompressAbove: %d is negative", c.compressAt)
	}
	seen := map[string]string{c.pk: "the partition key"}
	if c.sk != "" {
		seen[c.sk] = "the sort key"
	}
	for _, f := range c.attrs.fields() {
		if !validName(f.name) {
			return bad("WithAttributes: %s: %q is not an attribute name (1 to 255 bytes of UTF-8)", f.field, f.name)
		}
		if other, dup := seen[f.name]; dup {
			return bad("WithAttributes: %s: %q is already %s", f.field, f.name, other)
		}
		seen[f.name] = "Attributes." + f.field
	}
	return nil
}

func validName(s string) bool { return s != "" && len(s) <= 255 && utf8.ValidString(s) }

func validTable(s string) bool {
	if len(s) > 4 && s[:4] == "arn:" {
		return len(s) <= 1024
	}
	if len(s) < 3 || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
