package store

import (
	"context"
	"time"
)

// Getter is an optional capability: looking a record up without changing
// it, for the admin handler and for tests.
type Getter interface {
	// Get returns the record r names and true, or false when there is
	// none or it has expired at now.
	Get(ctx context.Context, r Ref, now time.Time) (Record, bool, error)
}

// Deleter is an optional capability: evicting a record whatever its
// state, for the admin handler.
type Deleter interface {
	// Delete removes the record r names and reports whether there was
	// one.
	Delete(ctx context.Context, r Ref) (bool, error)
}

// ExpiredDeleter is an optional capability of a store that does not
// expire records by itself.
type ExpiredDeleter interface {
	// DeleteExpired removes every record that has expired at now and
	// returns how many it removed.
	DeleteExpired(ctx context.Context, now time.Time) (int, error)
}

// Extender is an optional capability, for the engine's lease heartbeat.
type Extender interface {
	// Extend moves the lease end of the in-progress claim h to leaseEnd;
	// the record's ExpiresAt moves with it. Like Complete, it succeeds
	// while the record is in progress and holds h.Token, even when now is
	// past its LeaseEnd, and otherwise returns ErrLeaseLost, changing
	// nothing.
	Extend(ctx context.Context, h Hold, now, leaseEnd time.Time) error
}

// Extension names one claim for BatchExtender, with its new lease end.
type Extension struct {
	Hold
	LeaseEnd time.Time
}

// BatchExtender is an optional capability of an Extender, so that the
// heartbeat costs one call per beat per engine rather than one per claim.
type BatchExtender interface {
	// ExtendBatch applies Extend's contract to each extension
	// independently, at now, in one round trip, and returns one error
	// per extension, in order: nil, ErrLeaseLost, or that extend's
	// failure (a failure of the whole call in every slot).
	ExtendBatch(ctx context.Context, now time.Time, xs []Extension) []error
}

// Evicter is an optional capability: deleting the record a claim wrote
// when the answer it holds turned out wrong (a response streamed under a
// completed record whose handler then panicked). Without it the engine
// leaves such a record in place rather than delete another claim's.
type Evicter interface {
	// Evict deletes the record h names while it holds h.Token, in
	// progress or completed; otherwise (the key was taken over after the
	// record expired, or there is no record) it returns ErrLeaseLost and
	// changes nothing.
	Evict(ctx context.Context, h Hold) error
}

// Clock is an optional capability of a store that several engines share
// (a database server's clock, Redis's TIME). The engine aligns the time
// it passes to every store call with it, so that instances whose clocks
// disagree still judge leases alike.
type Clock interface {
	// Now returns the store's current time; it must not move backwards by
	// more than the store's clock is corrected.
	Now(ctx context.Context) (time.Time, error)
}

// FailoverBound is an optional capability of a store that can lose its
// primary and promote another (Redis Sentinel or Cluster).
type FailoverBound interface {
	// FailoverTime returns how long a failover may take, during which no
	// store call succeeds, from the store's own settings (0 when it has
	// none). The engine's default lease outlasts it, and a shorter
	// WithLease is refused.
	FailoverTime() time.Duration
}

// Notifier is an optional capability that wakes requests waiting for a
// claim to finish (the engine's wait mode).
type Notifier interface {
	// Watch returns a channel that is closed (or receives) once the
	// record r names is completed, released or deleted after Watch
	// returned, and a stop function that releases the watch; the engine
	// always calls it, and calling it twice is safe. Notifications may be
	// spurious or, when the store's channel to its server is broken,
	// missing: the engine polls as well.
	Watch(ctx context.Context, r Ref) (<-chan struct{}, func(), error)
}

// TxBeginner is an optional capability for exactly-once execution: the
// handler's own writes and the completion of the record commit in one
// transaction (the flow is in idem's package docs, "Exactly-once").
type TxBeginner interface {
	// BeginTx starts a transaction for the claim h; ctx bounds only the
	// start. It returns ErrLeaseLost when h no longer holds the record.
	BeginTx(ctx context.Context, h Hold) (Tx, error)
}

// TxClaimer is an optional capability of a TxBeginner that claims inside
// the transaction: the claim and BeginTx in one step, so that the claim,
// the handler's writes and the completed record commit together, in one
// durable commit instead of two. The engine calls ClaimTx wherever it
// would call Claim when the store is a TxBeginner that has it.
//
// An acquired claim lives in the returned Tx, which must hold it
// (ClaimHolder): other claims and Get see the record in progress, with
// its fingerprint, from the moment ClaimTx returns until the transaction
// ends; a Rollback (or the end of the store's session, a crash) ends the
// claim with it, and the key is free at once. The engine still releases
// the key after a rollback, token-checked, since a handler that committed
// its transaction early committed the claim too. Commit's contract is
// Tx's; after the handler or the server ended the transaction (the claim
// may be gone with it), a c.Failed outcome is stored on its own, claimed
// again if need be, and any other is refused.
type TxClaimer interface {
	// ClaimTx claims c's key as Store.Claim does. When it acquires the
	// claim it returns the transaction holding it; otherwise the Tx is
	// nil and nothing is left open. On an error nothing is held either:
	// the store has ended whatever it began.
	ClaimTx(ctx context.Context, c Claim) (ClaimResult, Tx, error)
}

// Tx is a transaction started by TxBeginner.BeginTx.
type Tx interface {
	// Context returns parent carrying the transaction, for the handler.
	Context(parent context.Context) context.Context
	// Commit writes the completed record inside the transaction, with the
	// same token check as Store.Complete, and commits: the handler's
	// writes and the record, or neither. It returns ErrLeaseLost, and
	// commits nothing, when the claim no longer holds the record. When the
	// transaction ended before Commit (the handler or the server ended
	// it), the handler's writes may be gone: a c.Failed outcome, which
	// says nothing happened, is then stored on its own (as Complete
	// would), and any other is refused with an error. As with Complete,
	// the caller reuses c.Result's memory once it returns.
	Commit(ctx context.Context, c Completion) error
	// Rollback ends the transaction without the record. After Commit, or
	// twice, it is a no-op.
	Rollback(ctx context.Context) error
}

// ClaimHolder is an optional capability of a Tx whose transaction holds
// the record's lock from BeginTx until it ends: while it lives no other
// request takes the key over, past its lease end too (Claim answers with
// the in-progress record), and a crash ends it with its connection.
type ClaimHolder interface {
	// HoldsClaim reports whether this transaction does; the engine then
	// writes nothing to the record while the work runs (no heartbeat
	// Extend, which would wait for that lock).
	HoldsClaim() bool
}
