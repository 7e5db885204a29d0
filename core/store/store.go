package store

import (
	"context"
	"errors"
	"time"
)

// Errors a store returns. Stores wrap them with %w when they add detail;
// the engine tests with errors.Is.
var (
	// ErrLeaseLost means the claim a call names (its [Hold]) no longer
	// holds the record: the record is gone, its token differs (another
	// request took the key over after the lease ended), or it is already
	// completed.
	ErrLeaseLost = errors.New("idem: claim lost: the record is no longer held by this token")
	// ErrCorruptRecord is wrapped by the error a store returns when a
	// record it reads back is not one a store can have written (see
	// [Record.Check]). The engine answers such a request 503 and never
	// replays the record.
	ErrCorruptRecord = errors.New("idem: corrupt record")
)

// State is the state of a stored record.
type State uint8

const (
	// InProgress marks a record whose claim is held by a running request.
	// Other requests with the key are refused until the claim completes,
	// is released, or its lease ends.
	InProgress State = 1
	// Completed marks a record holding a Result that is replayed to every
	// retry until the record expires.
	Completed State = 2
)

// String returns "in_progress", "completed" or "unknown".
func (s State) String() string {
	switch s {
	case InProgress:
		return "in_progress"
	case Completed:
		return "completed"
	}
	return "unknown"
}

// Ref names a record: its scope and its key. Scope holds any bytes (the
// namespace comes from the application, see idem's Scope); Key is 1 to
// 255 printable ASCII characters. Both are compared byte for byte.
type Ref struct {
	Scope, Key string
}

// Hold names one claim on a record: the record and the claim's token.
// Every write after the claim presents it, and succeeds only while the
// record still holds that token.
type Hold struct {
	Ref
	Token string
}

// MaxHead bounds a Result's Head: the engine never passes a longer one
// (it keeps only the outcome's kind and status when the headers would not
// fit), so a store may size a column or an item for it.
const MaxHead = 64 << 10

// Result is the outcome a completed record keeps, as the transport
// encoded it. A store keeps both byte strings as they are, and returns
// them as they were (a nil and an empty Body may come back alike).
type Result struct {
	// Head is the outcome's small part: its kind and, for HTTP, the status
	// and headers. It is never empty and at most MaxHead bytes; its first
	// byte names its format.
	Head []byte
	// Body is the outcome's payload: a response body, a message, a value.
	Body []byte
	// BodyOmitted reports that Body was not kept, because it was larger
	// than the engine or the store keeps; Body is then empty. A replay
	// carries the Head alone.
	BodyOmitted bool
}

// Record is what a store keeps for one Ref.
type Record struct {
	// Fingerprint identifies the request that created the record; a retry
	// with another fingerprint is refused.
	Fingerprint string
	// State is InProgress or Completed.
	State State
	// Result is the stored outcome; set when State is Completed.
	Result Result
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
	// Scope and Key name the record, as in Ref.
	Scope, Key string
	// Fingerprint is the request's fingerprint, stored with the claim.
	Fingerprint string
	// Token is a random value that identifies this claim; Complete, Release
	// and Extend present it (Hold).
	Token string
	// Now is the engine's current time. Stores compare against it, never
	// against their own clock.
	Now time.Time
	// LeaseEnd is when the claim stops blocking others if it is neither
	// completed nor released. It is after Now.
	LeaseEnd time.Time
}

// Ref returns the record the claim names.
func (c *Claim) Ref() Ref { return Ref{Scope: c.Scope, Key: c.Key} }

// Hold returns the hold a successful claim gives its caller.
func (c *Claim) Hold() Hold { return Hold{Ref: c.Ref(), Token: c.Token} }

// ClaimResult is the outcome of Store.Claim.
type ClaimResult struct {
	// Acquired reports that the caller now holds the claim.
	Acquired bool
	// Existing is the record that blocked the claim; set exactly when
	// Acquired is false. The caller may keep it and must not modify it:
	// its Result may be shared with the store.
	Existing *Record
}

// Completion is what Store.Complete and Tx.Commit write.
type Completion struct {
	// Result is the outcome to keep.
	Result Result
	// Failed reports that the outcome says the operation took no effect (an
	// HTTP 4xx, a FinalError from idem's Engine.Do). Only Tx.Commit reads
	// it, and no store keeps it.
	Failed bool
	// Now is the engine's current time.
	Now time.Time
	// ExpiresAt is when the completed record expires: the end of its
	// retention. It is after Now.
	ExpiresAt time.Time
}

// Store keeps idempotency records. Its three methods are the whole of what
// the engine needs; everything else is an optional capability. Every
// method is safe for concurrent use and honours ctx cancellation.
//
// A store that removes records by itself (a TTL, a sweeper) keeps an
// in-progress record at least until LeaseEnd + (LeaseEnd - CreatedAt),
// as long again as its lease has lasted, so that a late Complete, Extend
// or Release still finds it; Claim takes it over from LeaseEnd on, and
// Getter reports it gone from ExpiresAt on, as for any record.
type Store interface {
	// Claim takes (c.Scope, c.Key) in one atomic step when there is no
	// record or the record is takeable at c.Now ([Record.Takeable]): it
	// then stores InProgress with c.Fingerprint, c.Token, CreatedAt c.Now,
	// and LeaseEnd and ExpiresAt c.LeaseEnd, and reports Acquired.
	// Otherwise it leaves the record untouched and returns it as Existing,
	// read in the same atomic step. For one Ref at most one caller holds
	// the claim at a time.
	Claim(ctx context.Context, c Claim) (ClaimResult, error)

	// Complete turns the claim h into Completed with c.Result, replayable
	// until c.ExpiresAt. It succeeds while the record is in progress and
	// holds h.Token, even when c.Now is at or past its LeaseEnd: a lease
	// that ended without anyone taking the key over still belongs to its
	// token, so a completion that comes late (a slow handler, a store that
	// was down) lands. Otherwise (another token took the key over, the
	// record is completed or gone) it returns ErrLeaseLost and changes
	// nothing. A result without a Head (which the engine never sends) is
	// refused with an error of its own, changing nothing.
	//
	// The stored record is a snapshot the store owns: the caller may reuse
	// c.Result's memory once Complete returns, so a store that keeps it in
	// memory copies it. A completed record keeps its token, for Evicter.
	Complete(ctx context.Context, h Hold, c Completion) error

	// Release deletes the in-progress record h holds, so the next request
	// with the key runs again. It never deletes a completed record or
	// another claim's record; in those cases, and when there is no record,
	// it returns ErrLeaseLost.
	Release(ctx context.Context, h Hold) error
}
