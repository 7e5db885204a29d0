package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Op names one operation that Do runs at most once per key: a message to
// consume, a job to run, an RPC to serve.
type Op struct {
	// Namespace is the caller's namespace (a tenant, a client); "" is
	// global. Two namespaces never share a key.
	Namespace string
	// Kind and Name say what the operation is, such as "nats" and
	// "orders.created", or "grpc" and "/orders.v1.Orders/Create". With the
	// namespace they scope the key, as the method and route template do
	// for HTTP ([Scope]), and they name the operation in events as
	// Event.Method and Event.Route.
	Kind, Name string
	// Key is the idempotency key: 1 to MaxKeyLength printable ASCII
	// characters.
	Key string
	// Fingerprint identifies the request behind the key: a retry must give
	// the same one, and another request with the key gets ErrMismatch.
	// [Fingerprint] builds one from three parts.
	Fingerprint string
	// Retention is how long the result is replayed; 0 means the engine's
	// (WithRetention).
	Retention time.Duration
}

// Errors Do returns; test them with errors.Is.
var (
	// ErrInFlight means another call with the key is running. The error
	// is a *RetryError with a hint of when to try again.
	ErrInFlight = errors.New("idem: a call with this key is in flight")
	// ErrMismatch means the key was used with another fingerprint. The
	// stored result is untouched.
	ErrMismatch = errors.New("idem: the key was already used with a different request")
	// ErrStoreFailure means the store failed or did not answer in time;
	// the store's error is wrapped too. The error is a *RetryError.
	ErrStoreFailure = errors.New("idem: the idempotency store failed")
	// ErrResultOmitted means the operation ran once already, but its
	// record was kept without the result (it was larger than the store
	// keeps, such as the memory store's byte budget, or MySQL's packet
	// limit, or the engine's bound on pending work): the function does not
	// run again, and the value cannot be replayed. It is never retryable;
	// treat it as the operation having happened with its outcome unknown.
	ErrResultOmitted = errors.New("idem: the operation ran, but its result was too large to keep and cannot be replayed")
	// ErrNamespaceRequired means the engine requires a namespace
	// (WithRequiredNamespace) and the call had none: it was refused rather
	// than scoped globally.
	ErrNamespaceRequired = errors.New("idem: the call has no namespace, and the engine requires one")
)

// RetryError is an error a retry with the same key can get past:
// ErrInFlight or ErrStoreFailure, with the time to wait first.
type RetryError struct {
	Err   error
	After time.Duration
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("%v; retry with the same key in %v", e.Err, e.After)
}

func (e *RetryError) Unwrap() error { return e.Err }

// FinalError is an error that settles an operation: Do stores it in place
// of a result and returns it to every retry, instead of releasing the key
// (as for a 4xx in HTTP). Make one with Final. On a replay, Err is an error
// with the stored message; the original error's type and identity do not
// survive the store.
type FinalError struct{ Err error }

func (e *FinalError) Error() string { return e.Err.Error() }

func (e *FinalError) Unwrap() error { return e.Err }

// Final marks err as the operation's final answer (see FinalError); a nil
// err stays nil.
//
//	if balance < amount {
//		return nil, idem.Final(ErrInsufficientFunds) // retries get the same answer
//	}
func Final(err error) error {
	if err == nil {
		return nil
	}
	return &FinalError{Err: err}
}

// How Do's results were kept before results were opaque: as an HTTP
// response with one of these statuses. Such records still replay.
const (
	legacyValue = 200 // Body is the value
	legacyFinal = 422 // Body is the final error's message
)

// Do runs fn at most once per (op.Namespace, op.Kind, op.Name, op.Key),
// stores what it returns, and hands that to every retry. It returns fn's
// value, or the stored one with replayed set.
//
// An error from fn releases the key, so a retry runs fn again, unless it
// is marked Final, when it is stored and returned to every retry. A key
// in flight gives ErrInFlight (in wait mode, WithWait, Do first waits for
// it, then replays or runs); a retry with another fingerprint gives
// ErrMismatch; a failing store gives ErrStoreFailure (with WithFailOpen,
// fn runs unprotected). A panic in fn releases the key and goes on. While
// fn runs the heartbeat keeps its claim; with an exactly-once store, fn's
// ctx carries the transaction that commits with the result. Package docs:
// the outcome table.
//
//	op := idem.Op{Kind: "nats", Name: "orders", Key: msgID, Fingerprint: idem.Fingerprint("nats", "orders", data)}
//	receipt, replayed, err := engine.Do(ctx, op, func(ctx context.Context) ([]byte, error) { return charge(ctx, data) })
func (e *Engine) Do(ctx context.Context, op Op, fn func(context.Context) ([]byte, error)) (value []byte, replayed bool, err error) {
	c := Call{do: true}
	resp, err := c.start(e, ctx, op)
	if resp != nil || err != nil {
		c.end()
		if resp != nil {
			return doResult(resp)
		}
		return nil, false, err
	}
	defer c.Release() // fn panicked: release, and let the panic go on
	value, err = fn(c.Context(ctx))
	var final *FinalError
	switch {
	case err == nil:
		if err := c.Complete(Response{kind: kindValue, Body: value}); err != nil {
			return nil, false, err
		}
		return value, false, nil
	case errors.As(err, &final):
		if err := c.Complete(Response{kind: kindFinal, Body: []byte(final.Err.Error())}); err != nil {
			return nil, false, err
		}
		return nil, false, err
	}
	c.Release()
	return nil, false, err
}

// errCommit marks an ErrStoreFailure whose cause is a failed commit of
// the exactly-once transaction.
var errCommit = errors.New("committing the transaction with the result failed")

// commitFailed is Do's error for an exactly-once commit that failed: the
// result was not kept, the key is released, and a retry learns the
// outcome.
func (f *flight) commitFailed() error {
	return &RetryError{
		Err:   fmt.Errorf("%w: %w: %w", ErrStoreFailure, errCommit, f.ev.Err),
		After: f.e.retryAfter(0),
	}
}

// checkKey reports a key a store cannot hold: 1 to MaxKeyLength bytes of
// printable ASCII (spaces included).
func checkKey(k string) error {
	if k == "" || len(k) > MaxKeyLength {
		return fmt.Errorf("%w: the key is %d characters long; it must be 1 to %d", ErrInvalidKey, len(k), MaxKeyLength)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return fmt.Errorf("%w: byte 0x%02x at position %d is not printable ASCII; hash keys that are not", ErrInvalidKey, k[i], i+1)
		}
	}
	return nil
}

// Report tells the engine's observer of a call a transport answered
// without Do, so that every transport's events count alike: a call that
// ran unprotected because its key is optional and absent or its method is
// skipped (OutcomeSkipped), or one refused for a missing or malformed key
// (OutcomeMissingKey, OutcomeInvalidKey). Nothing is stored. Any other
// outcome is an error.
//
//	engine.Report(ctx, idem.Op{Kind: "grpc", Name: method}, idem.OutcomeSkipped)
func (e *Engine) Report(ctx context.Context, op Op, o Outcome) error {
	switch o {
	case OutcomeSkipped, OutcomeMissingKey, OutcomeInvalidKey:
	default:
		return fmt.Errorf("idem: Report takes the skipped, missing_key or invalid_key outcome, not %q", o)
	}
	e.cfg.observer(ctx, Event{Outcome: o, Method: op.Kind, Route: op.Name, key: op.Key})
	return nil
}

// inFlightErr is ErrInFlight, with the error that cut a wait short.
func inFlightErr(cause error) error {
	if cause != nil {
		return fmt.Errorf("%w (%w)", ErrInFlight, cause)
	}
	return ErrInFlight
}

// doResult turns a stored Do result back into what Do returns.
func doResult(r *Response) ([]byte, bool, error) {
	switch {
	case r.BodyOmitted:
		return nil, true, ErrResultOmitted
	case r.kind == kindValue, r.kind == kindHTTP && r.Status == legacyValue:
		// The caller's own copy: other replays may share r (the replay
		// cache, duplicates waiting in this process).
		return bytes.Clone(r.Body), true, nil
	case r.kind == kindFinal, r.kind == kindHTTP && r.Status == legacyFinal:
		return nil, true, &FinalError{Err: errors.New(string(r.Body))}
	}
	return nil, true, fmt.Errorf("%w: the stored record is not a result of Do (status %d)", ErrMismatch, r.Status)
}

// DoJSON is Do for a result of type T, stored as JSON: fn's value is
// encoded with encoding/json, and a replay decodes it.
//
//	receipt, replayed, err := idem.DoJSON(ctx, engine, op, func(ctx context.Context) (Receipt, error) {
//		return charge(ctx, order)
//	})
func DoJSON[T any](ctx context.Context, e *Engine, op Op, fn func(context.Context) (T, error)) (T, bool, error) {
	var zero T
	b, replayed, err := e.Do(ctx, op, func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			// fn ran, side effects and all: the key must not be
			// released for a retry to run it again.
			return nil, Final(fmt.Errorf("idem: encoding the result as JSON: %w", err))
		}
		return b, nil
	})
	if err != nil {
		return zero, replayed, err
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return zero, replayed, fmt.Errorf("idem: decoding the stored result: %w", err)
	}
	return v, replayed, nil
}
