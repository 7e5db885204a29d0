package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"time"
)

// Outcome says what the engine did with one request.
type Outcome string

// The outcomes, one per request.
const (
	// OutcomeExecuted: the handler ran under a fresh claim and its response
	// was stored.
	OutcomeExecuted Outcome = "executed"
	// OutcomeReplayed: a stored response was replayed.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeReplayedAfterWait: in wait mode, the request waited for the
	// first one to finish and then replayed its response.
	OutcomeReplayedAfterWait Outcome = "replayed_after_wait"
	// OutcomeReleased: the handler ran but its response is one the client
	// should retry (5xx, 429, panic, hijack), so the key was released.
	OutcomeReleased Outcome = "released"
	// OutcomeConflict: another request holds the key; 409.
	OutcomeConflict Outcome = "conflict"
	// OutcomeWaitTimeout: in wait mode, the first request did not finish in
	// time; 409.
	OutcomeWaitTimeout Outcome = "wait_timeout"
	// OutcomeFingerprintMismatch: the key was used for a different request;
	// 422.
	OutcomeFingerprintMismatch Outcome = "fingerprint_mismatch"
	// OutcomeMissingKey: a required key is absent; 400.
	OutcomeMissingKey Outcome = "missing_key"
	// OutcomeInvalidKey: the key header is malformed; 400.
	OutcomeInvalidKey Outcome = "invalid_key"
	// OutcomeBodyTooLarge: the request body exceeds the cap; 413.
	OutcomeBodyTooLarge Outcome = "body_too_large"
	// OutcomeBodyUnreadable: the request body could not be read (the
	// client went away, or sent less than its Content-Length; or, with
	// WithJSONFingerprint or WithKeyField, it is not valid JSON); 400.
	OutcomeBodyUnreadable Outcome = "body_unreadable"
	// OutcomeStoreFailure: the store failed or timed out. Fail closed
	// answers 503; fail open runs the handler unprotected
	// (Event.FailedOpen).
	OutcomeStoreFailure Outcome = "store_failure"
	// OutcomeNotAcceptable: the stored response is content-encoded in a
	// coding the retry does not accept and the engine cannot decode (it
	// decodes gzip and deflate); 406. Mount compression outside idem.
	OutcomeNotAcceptable Outcome = "not_acceptable"
	// OutcomeUndecryptable: the key's stored result is sealed
	// (WithEncryption) and did not open: its key is not in the ring, or
	// the record was altered. The request got 500; nothing ran.
	OutcomeUndecryptable Outcome = "undecryptable"
	// OutcomeNoNamespace: the engine requires a namespace
	// (WithRequiredNamespace) and the request had none; 403.
	OutcomeNoNamespace Outcome = "no_namespace"
	// OutcomeCanceled: the caller's context ended (the client hung up)
	// before the request was claimed or while it waited; the work did not
	// run. It is not a store failure: nothing runs unprotected, and it is
	// logged at debug level.
	OutcomeCanceled Outcome = "canceled"
	// OutcomeSkipped: a request with a protected method ran unprotected:
	// its key is optional and absent, or its route is marked Skip.
	// Requests with other methods (GET, HEAD, ...) produce no event.
	OutcomeSkipped Outcome = "skipped"
)

// The outcomes of the engine's background work, each reported in an event
// of its own after the request's (see WithCompletionRetry). Their Method,
// Route and KeyHash are the request's; Err says why.
const (
	// OutcomeCompletedLate: a completion that failed when the handler
	// ran was stored by a later try; retries replay it.
	OutcomeCompletedLate Outcome = "completed_late"
	// OutcomeCompletionLost: the claim was lost (its lease ended, or
	// another request took the key over) before the completion landed;
	// a retry runs the handler again.
	OutcomeCompletionLost Outcome = "completion_lost"
	// OutcomeCompletionExpired: the store did not take the completion
	// within the completion retry limit; the key frees at its lease end.
	OutcomeCompletionExpired Outcome = "completion_expired"
	// OutcomeCompletionDropped: the completion was dropped, the bound on
	// pending work being reached or the engine closed; the key frees at
	// its lease end.
	OutcomeCompletionDropped Outcome = "completion_dropped"
	// OutcomeReleaseFailed: a release (after a 5xx, a panic, or a failed
	// Claim that may have landed) kept failing until the claim's lease
	// ended, or was dropped; the key frees at the lease end. Also an
	// eviction of a panicked stream's record that kept failing until the
	// completion retry limit: retries may replay its status and headers.
	OutcomeReleaseFailed Outcome = "release_failed"
)

// Background reports whether o is an outcome of the engine's background
// work, reported after the request's own event, rather than a request's.
func (o Outcome) Background() bool {
	switch o {
	case OutcomeCompletedLate, OutcomeCompletionLost, OutcomeCompletionExpired, OutcomeCompletionDropped, OutcomeReleaseFailed:
		return true
	}
	return false
}

// Event describes one request the engine saw. The observer gets exactly one
// per request with a protected method (POST and PATCH by default) and per
// Engine.Do call, once it is answered (or, for a panic, before the panic
// goes on), and one per background task (Outcome.Background).
type Event struct {
	Outcome Outcome
	// Method and Route are the request method and route template; for an
	// operation run with Engine.Do, its Op.Kind and Op.Name.
	Method, Route string
	// Status is the status code sent to the client (0 after a hijack or
	// panic, and for Engine.Do).
	Status int
	// Total is the time spent from the engine's start to the end of the
	// response; Handler the part of it spent in the handler.
	Total, Handler time.Duration
	// Claim is the time the store's Claim calls took (all of them, in wait
	// mode); Finish the time of the Complete or Release call, if any.
	Claim, Finish time.Duration
	// Waited is the time spent waiting in wait mode.
	Waited time.Duration
	// FailedOpen reports that the store failed and the handler ran
	// unprotected (OutcomeStoreFailure with fail open).
	FailedOpen bool
	// Err is the store error behind OutcomeStoreFailure, or an error that
	// happened after the handler ran (a failed Complete or Release), for
	// logs.
	Err error

	key string // reported only through KeyHash
}

// KeyHash returns the first 16 hex digits of the SHA-256 of the request's
// key, or "" when it had none. Events never carry the raw key.
func (ev *Event) KeyHash() string { return hashKey(ev.key) }

// Observer receives one Event per request. It runs on the request's
// goroutine: keep it fast.
type Observer func(ctx context.Context, ev Event)

// StoreOp names a store call for a StoreObserver.
type StoreOp string

// The store calls the engine and the admin handler make.
const (
	StoreClaim    StoreOp = "claim"
	StoreComplete StoreOp = "complete"
	StoreRelease  StoreOp = "release"
	StoreExtend   StoreOp = "extend"
	StoreGet      StoreOp = "get"
	StoreDelete   StoreOp = "delete"
	StoreBeginTx  StoreOp = "begin_tx"
	StoreCommit   StoreOp = "commit"
	StoreRollback StoreOp = "rollback"
	StoreEvict    StoreOp = "evict"
	StoreNow      StoreOp = "now"
)

// StoreObserver is told of every store call the engine and its admin
// handler make: which, how long it took, and its error. It runs on the
// caller's goroutine: keep it fast.
type StoreObserver func(ctx context.Context, op StoreOp, d time.Duration, err error)

// hashKey returns the key's hash as reported in events.
func hashKey(key string) string {
	if key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// SlogObserver returns an Observer that logs each event with logger (nil
// means slog.Default()): replays, executions and skips at debug level;
// client errors (conflict, mismatch, bad key) and a completion that landed
// late at info; a fail-open run and an execution whose completion or
// release failed at warn; a store failure and background work that gave
// up (a completion lost, expired or dropped, a failed release) at error.
// It logs the key's hash, never the key.
func SlogObserver(logger *slog.Logger) Observer {
	return SlogObserverLevel(logger, slog.LevelDebug)
}

// SlogObserverLevel is SlogObserver with replays, executions and skips
// logged at level routine instead of debug: slog.LevelInfo gives one line
// per request a service handles, as the examples do:
//
//	engine, err := idem.New(store, idem.WithObserver(idem.SlogObserverLevel(logger, slog.LevelInfo)))
func SlogObserverLevel(logger *slog.Logger, routine slog.Level) Observer {
	return func(ctx context.Context, ev Event) {
		l := logger
		if l == nil {
			l = slog.Default()
		}
		level := routine
		switch ev.Outcome {
		case OutcomeConflict, OutcomeWaitTimeout, OutcomeFingerprintMismatch,
			OutcomeMissingKey, OutcomeInvalidKey, OutcomeBodyTooLarge, OutcomeBodyUnreadable, OutcomeNotAcceptable:
			level = slog.LevelInfo
		case OutcomeNoNamespace:
			level = slog.LevelWarn // a request refused for want of an identity: loud
		case OutcomeUndecryptable:
			level = slog.LevelError
		case OutcomeStoreFailure:
			level = slog.LevelError
			if ev.FailedOpen {
				level = slog.LevelWarn
			}
		case OutcomeCompletedLate:
			level = slog.LevelInfo
		case OutcomeCompletionLost, OutcomeCompletionExpired, OutcomeCompletionDropped, OutcomeReleaseFailed:
			level = slog.LevelError
		default:
			if ev.Err != nil {
				level = slog.LevelWarn
			}
		}
		if !l.Enabled(ctx, level) {
			return
		}
		attrs := make([]slog.Attr, 0, 10)
		attrs = append(attrs,
			slog.String("outcome", string(ev.Outcome)),
			slog.String("method", ev.Method),
			slog.String("route", ev.Route),
			slog.Int("status", ev.Status),
			slog.Duration("total", ev.Total),
		)
		if ev.key != "" {
			attrs = append(attrs, slog.String("key_hash", ev.KeyHash()))
		}
		if ev.FailedOpen {
			attrs = append(attrs, slog.Bool("failed_open", true))
		}
		if ev.Waited > 0 {
			attrs = append(attrs, slog.Duration("waited", ev.Waited))
		}
		if ev.Err != nil {
			attrs = append(attrs, slog.String("error", ev.Err.Error()))
		}
		l.LogAttrs(ctx, level, "idempotency", attrs...)
	}
}
