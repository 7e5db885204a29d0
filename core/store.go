package idem

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Errors a Store returns. Stores wrap them with %w when they add detail;
// callers test with errors.Is.
var (
	// ErrLeaseLost means the claim a Complete, Release or Extend call names
	// is no longer held by the caller: the record is gone, its token differs
	// (another request took the key over after the lease ended), it is
	// already completed, or the lease has passed.
	ErrLeaseLost = errors.New("idem: claim lost: the record is no longer held by this token")
)

// State is the state of a stored record.
type State uint8

const (
	// StateInProgress marks a record whose claim is held by a running
	// request. Other requests with the same key get a conflict until the
	// claim completes, is released, or its lease ends.
	StateInProgress State = 1
	// StateCompleted marks a record holding a response that is replayed to
	// every retry until the record expires.
	StateCompleted State = 2
)

// String returns "in_progress", "completed" or "unknown".
func (s State) String() string {
	switch s {
	case StateInProgress:
		return "in_progress"
	case StateCompleted:
		return "completed"
	}
	return "unknown"
}

// Response is a stored HTTP response.
type Response struct {
	// Status is the HTTP status code, 200 to 599.
	Status int
	// Header holds the headers to replay. The engine never stores
	// Set-Cookie, Date, Content-Length or hop-by-hop headers.
	Header http.Header
	// Body is the response body. It is empty when BodyOmitted is set.
	Body []byte
	// BodyOmitted reports that the body was larger than the engine's
	// response cap and was streamed to the first client without being
	// kept. A replay carries the status and headers only.
	BodyOmitted bool
}

// Record is what a store keeps for one (scope, key).
type Record struct {
	// Fingerprint identifies the request that created the record; a retry
	// with another fingerprint is refused.
	Fingerprint string
	// State is StateInProgress or StateCompleted.
	State State
	// Response is the stored response; set when State is StateCompleted.
	Response *Response
	// CreatedAt is the time the claim was taken (the engine's now).
	CreatedAt time.Time
	// LeaseEnd is the time an in-progress claim stops blocking others.
	// It is zero for completed records.
	LeaseEnd time.Time
	// ExpiresAt is the time the record stops existing: the lease end for an
	// in-progress record, the end of retention for a completed one.
	ExpiresAt time.Time
}

// Claim asks a store to take (Scope, Key) for one request.
type Claim struct {
	// Scope is the record's namespace, built with [Scope]. Stores treat it
	// as opaque bytes.
	Scope string
	// Key is the idempotency key, 1 to 255 printable ASCII characters.
	Key string
	// Fingerprint is the request's fingerprint, stored with the claim.
	Fingerprint string
	// Token is a random value that identifies this claim; Complete, Release
	// and Extend must present it.
	Token string
	// Now is the engine's current time. Stores compare against it, never
	// against their own clock.
	Now time.Time
	// LeaseEnd is when the claim stops blocking others if it is neither
	// completed nor released. It is after Now.
	LeaseEnd time.Time
}

// ClaimResult is the outcome of Store.Claim.
type ClaimResult struct {
	// Acquired reports that the caller now holds the claim.
	Acquired bool
	// Existing is the record that blocked the claim; set exactly when
	// Acquired is false. The caller may keep it; its Response may be shared
	// with the store and must not be modified.
	Existing *Record
}

// Store keeps idempotency records. Everything that must be atomic lives in
// a Store; the policy lives in the Engine. conformance.RunStore checks every
// rule below, and every store must pass it.
//
// Claim takes (c.Scope, c.Key) in one atomic step when there is no record,
// when the record has expired (c.Now is at or past its ExpiresAt), or when it
// is an in-progress record whose lease has ended (c.Now is at or past its
// LeaseEnd). Otherwise it leaves the record untouched and returns it as
// Existing in the same call. For one (scope, key) at most one caller holds
// the claim at a time. A new claim is stored as StateInProgress with
// c.Fingerprint, c.Token, CreatedAt c.Now and LeaseEnd and ExpiresAt
// c.LeaseEnd.
//
// Complete turns the claim into StateCompleted with resp, replayable until
// expiresAt. It succeeds while the record is in progress and holds token,
// even when now is at or past its LeaseEnd: a lease that ended without
// anyone taking the key over still belongs to its token, so a completion
// that comes late (a slow handler, a store that was down) lands.
// Otherwise (another token took the key over, the record is completed or
// gone) it returns ErrLeaseLost and changes nothing. The stored record is
// a snapshot the store owns: the caller may reuse resp.Body's memory, and
// a handler may still hold resp.Header, once Complete returns, so a store
// that keeps the response in memory copies both. A completed record keeps
// the token, for Evicter.
//
// Release deletes an in-progress record that holds token, so the next
// request with the key runs again. It never deletes a completed record or
// another claim's record; in those cases, and when there is no record, it
// returns ErrLeaseLost.
//
// A store that removes records by itself (a TTL, a sweeper) keeps an
// in-progress record at least until LeaseEnd + (LeaseEnd - CreatedAt),
// as long again as its lease has lasted, so that a late Complete, Extend
// or Release still finds it; Claim takes it over from LeaseEnd on, and
// Getter reports it gone from ExpiresAt on, as for any record.
//
// Scope and Key are compared byte for byte. Scope may hold any bytes
// (the namespace comes from the application); Key is printable ASCII.
//
// Every method is safe for concurrent use and honours ctx cancellation.
type Store interface {
	Claim(ctx context.Context, c Claim) (ClaimResult, error)
	Complete(ctx context.Context, scope, key, token string, resp Response, now, expiresAt time.Time) error
	Release(ctx context.Context, scope, key, token string) error
}

// Getter is an optional Store capability: looking a record up without
// changing it (for the admin handler and for tests).
//
// Get returns the record for (scope, key) and true, or false when there is
// none or it has expired at now.
type Getter interface {
	Get(ctx context.Context, scope, key string, now time.Time) (Record, bool, error)
}

// Deleter is an optional Store capability: evicting a record whatever its
// state. Delete reports whether a record was there.
type Deleter interface {
	Delete(ctx context.Context, scope, key string) (bool, error)
}

// ExpiredDeleter is an optional Store capability: removing every record
// that has expired at now. It returns how many it removed. Stores that
// expire records by themselves need not implement it.
type ExpiredDeleter interface {
	DeleteExpired(ctx context.Context, now time.Time) (int, error)
}

// Extender is an optional Store capability: moving the lease end of an
// in-progress claim that holds token, for the engine's lease heartbeat.
// Like Complete, it succeeds while the record is in progress and holds
// token, even when now is past its LeaseEnd, and returns ErrLeaseLost,
// changing nothing, otherwise. The record's ExpiresAt moves with its
// LeaseEnd.
type Extender interface {
	Extend(ctx context.Context, scope, key, token string, now, leaseEnd time.Time) error
}

// BatchExtender is an optional Store capability of an Extender: moving the
// lease ends of many claims in one round trip, so that the heartbeat costs
// one call per beat per engine rather than one per claim. ExtendBatch
// applies Extender.Extend's contract to each ref independently, at now,
// and returns one error per ref, in order: nil, ErrLeaseLost, or that
// extend's failure (a failure of the whole call in every slot).
type BatchExtender interface {
	ExtendBatch(ctx context.Context, now time.Time, refs []ExtendRef) []error
}

// ExtendRef names one claim for BatchExtender, with its new lease end.
type ExtendRef struct {
	Scope, Key, Token string
	LeaseEnd          time.Time
}

// Evicter is an optional Store capability: deleting the record a claim
// wrote, whatever its state, when the answer it holds turned out wrong (a
// response streamed under a completed record whose handler then
// panicked). Evict deletes the record for (scope, key) only while it holds
// token, in progress or completed; otherwise (the key was taken over
// after the record expired, or there is no record) it returns
// ErrLeaseLost and changes nothing. Without it the engine leaves such a
// record in place rather than delete another claim's record.
type Evicter interface {
	Evict(ctx context.Context, scope, key, token string) error
}

// Clock is an optional Store capability: the store's own time, for stores
// that several engines share (a database server's clock, Redis's TIME).
// The engine aligns the time it passes to every store call with Now (see
// the package docs, "Time"), so that instances whose clocks disagree
// still judge leases alike. Now returns the store's current time; it
// must not move backwards by more than the store's clock is corrected.
type Clock interface {
	Now(ctx context.Context) (time.Time, error)
}

// FailoverBound is an optional Store capability of a store that can lose
// its primary and promote another (Redis Sentinel or Cluster). FailoverTime
// returns how long such a failover may take, during which no store call
// succeeds, from the store's own settings (or 0 when the store has no
// failover). New sets the default lease so that a claim outlasts it, and
// refuses a shorter WithLease.
type FailoverBound interface {
	FailoverTime() time.Duration
}

// Notifier is an optional Store capability that wakes requests waiting for
// a claim to finish (the engine's wait mode).
//
// Watch returns a channel that is closed (or receives) once the record for
// (scope, key) is completed, released or deleted after Watch returned. The
// returned stop function releases the watch; the engine always calls it,
// and calling it more than once is safe.
// Notifications may be spurious or, when the store's channel to its
// server is broken, missing: the engine polls as well.
type Notifier interface {
	Watch(ctx context.Context, scope, key string) (<-chan struct{}, func(), error)
}

// TxBeginner is an optional Store capability for exactly-once execution:
// the handler's own writes and the completion of the record commit in one
// transaction (the flow is in the package docs, "Exactly-once").
//
// BeginTx starts a transaction for the claim that holds token; ctx bounds
// only the start. Tx.Commit writes the completed record inside it with the
// same token check as Store.Complete, returning ErrLeaseLost and
// committing nothing when the claim is no longer held; as with Complete,
// the caller reuses resp.Body's memory once it returns. Rollback after
// Commit, or twice, is a no-op.
type TxBeginner interface {
	BeginTx(ctx context.Context, scope, key, token string) (Tx, error)
}

// ClaimHolder is an optional capability of a Tx whose transaction holds
// the record's lock from BeginTx until it ends: while it lives no other
// request takes the key over, past its lease end too (Claim answers with
// the in-progress record), and a crash ends it with its connection.
// HoldsClaim reports whether this one does; the engine then writes
// nothing to the record while the work runs (no heartbeat Extend, which
// would wait for that lock or conflict with the transaction's snapshot).
type ClaimHolder interface {
	HoldsClaim() bool
}

// Tx is a transaction started by TxBeginner.BeginTx.
type Tx interface {
	// Context returns parent carrying the transaction, for the handler.
	Context(parent context.Context) context.Context
	Commit(ctx context.Context, resp Response, now, expiresAt time.Time) error
	Rollback(ctx context.Context) error
}
