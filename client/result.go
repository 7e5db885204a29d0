package idemclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Result is what happened to one logical request that the transport
// protected.
type Result struct {
	// Key is the idempotency key sent on every attempt: the caller's, or
	// the one the transport made.
	Key string
	// Attempts is how many times the request was sent; 1 when it was not
	// retried.
	Attempts int
	// Replayed reports whether the final response carries the replay
	// header with the value "true": the server answered from its store,
	// and the handler did not run for this attempt.
	Replayed bool
}

type resultKey struct{}

// ResultOf returns the Result of the logical request that resp answers.
// ok is false when resp did not come from a Transport, or its request was
// sent as it was (a method the transport does not protect, or no key).
//
//	resp, err := client.Post(url, "application/json", body)
//	if r, ok := idemclient.ResultOf(resp); ok && r.Replayed { ... }
func ResultOf(resp *http.Response) (r Result, ok bool) {
	if resp == nil || resp.Request == nil {
		return Result{}, false
	}
	r, ok = resp.Request.Context().Value(resultKey{}).(Result)
	return r, ok
}

// Attempt describes one attempt of a logical request, for the hook set
// with WithOnAttempt.
type Attempt struct {
	// Request is the request sent: a clone of the caller's with the key.
	// Its body has been read; do not read it.
	Request *http.Request
	// Key is the idempotency key.
	Key string
	// Number is 1 for the first attempt, 2 for the first retry, and so on.
	Number int
	// Status is the response's status code, or 0 when Err is set.
	Status int
	// Err is the transport error of the attempt, or nil with a response.
	Err error
	// Replayed reports whether the response carries the replay header.
	Replayed bool
	// Duration is how long the attempt took, until the response headers
	// or the error.
	Duration time.Duration
	// Retry reports whether another attempt follows, after Wait. The
	// request's context can still end the wait early.
	Retry bool
	// Wait is the time before the next attempt when Retry is set.
	Wait time.Duration
}

// Error is the error of a protected request whose last attempt failed
// without a response, or that was never sent (Attempts is 0): its context
// had ended, or its body could not be read. The request may or may not
// have reached the server: sending it again later with the same Key is
// safe.
//
//	var e *idemclient.Error
//	if errors.As(err, &e) { log.Printf("gave up after %d attempts", e.Attempts) }
type Error struct {
	Key      string // the idempotency key sent
	Attempts int    // attempts made, the failed one included; 0 when none was
	Err      error  // the last attempt's error, the context's, or the body's
}

func (e *Error) Error() string {
	switch e.Attempts {
	case 0:
		return fmt.Sprintf("idemclient: not sent: %v", e.Err)
	case 1:
		return fmt.Sprintf("idemclient: 1 attempt: %v", e.Err)
	}
	return fmt.Sprintf("idemclient: %d attempts: %v", e.Attempts, e.Err)
}

// Unwrap returns the last attempt's error.
func (e *Error) Unwrap() error { return e.Err }

// Timeout reports whether the last error was a timeout, so that
// (*url.Error).Timeout keeps working through this wrapper.
func (e *Error) Timeout() bool {
	t, ok := errors.AsType[timeouter](e.Err)
	return ok && t.Timeout()
}

type timeouter interface {
	error
	Timeout() bool
}

func withResult(req *http.Request, r Result) *http.Request {
	return req.WithContext(context.WithValue(req.Context(), resultKey{}, r))
}
