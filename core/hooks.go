package idem

import (
	"bytes"
	"context"
	"time"
)

// This file is the two hooks around a stored result: WithRedact shapes
// what is stored, WithReplayHook what a replay sends.

// WithRedact sets a function that decides what is stored of each result
// (and so what every replay gets), while the first client gets the full
// response: fn gets its own copy of the response (status, headers and
// body; for Do and gRPC, the value in Body) and returns what to keep,
// with headers dropped or masked and fields masked in the body. The
// status it returns is ignored: the status was decided when the result
// was kept. fn runs on the request's goroutine before the record is
// stored (and before WithEncryption seals it); it must not block.
// Default: everything WithReplayedHeaders allows is stored.
//
//	idem.WithRedact(func(_ context.Context, r idem.Response) idem.Response {
//		r.Header.Del("X-Card-Holder")
//		r.Body = cardNumber.ReplaceAll(r.Body, []byte(`"card":"****"`))
//		return r
//	})
func WithRedact(fn func(ctx context.Context, resp Response) Response) Option {
	return func(c *config) error {
		if fn == nil {
			return badOption("nil redact function")
		}
		c.redact = fn
		return nil
	}
}

// WithReplayHook sets a function that adjusts each replayed response
// before it is sent, with the time its record was created: an
// Idempotent-Replayed-At or Age header, say. fn gets its own copy of the
// stored response and changes it in place. What it can say is bounded by
// what was stored: the replay of an omitted body has no body to change.
// On HTTP the replay marker and Content-Length are set after fn runs.
// Default: none.
//
//	idem.WithReplayHook(func(_ context.Context, r *idem.Response, created time.Time) {
//		r.Header.Set("Idempotent-Replayed-At", created.UTC().Format(http.TimeFormat))
//	})
func WithReplayHook(fn func(ctx context.Context, resp *Response, created time.Time)) Option {
	return func(c *config) error {
		if fn == nil {
			return badOption("nil replay hook")
		}
		c.replayHook = fn
		return nil
	}
}

// redacted returns what is stored of resp: resp itself, or what
// WithRedact keeps of a copy.
func (f *flight) redacted(resp Response) Response {
	fn := f.e.cfg.redact
	if fn == nil {
		return resp
	}
	out := fn(f.ctx, copyResponse(&resp))
	out.Status, out.kind, out.BodyOmitted = resp.Status, resp.kind, resp.BodyOmitted || out.BodyOmitted
	if out.BodyOmitted {
		out.Body = nil
	}
	return out
}

// replayed returns the response a replay of rec sends: rec's, or the
// replay hook's copy of it.
func (f *flight) replayed(rec *record) *Response {
	fn := f.e.cfg.replayHook
	if fn == nil {
		return rec.Response
	}
	out := copyResponse(rec.Response)
	fn(f.ctx, &out, rec.CreatedAt)
	return &out
}

// copyResponse returns a deep copy of r, for a hook to change.
func copyResponse(r *Response) Response {
	out := *r
	out.Header = r.Header.Clone()
	if out.Header == nil {
		out.Header = make(map[string][]string)
	}
	out.Body = bytes.Clone(r.Body)
	return out
}
