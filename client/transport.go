package idemclient

import (
	"context"
	"io"
	"net/http"
	"slices"
	"time"
)

// Transport is an http.RoundTripper that makes protected requests (POST
// and PATCH by default) safe to retry: it gives each one an idempotency key
// and retries it with that key and the same body when the answer says a
// retry may succeed. See the package documentation for what it retries.
// Make one with New; the zero value is not usable. It is safe for
// concurrent use.
type Transport struct {
	base http.RoundTripper
	cfg  config
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport that sends requests through base, or through
// http.DefaultTransport when base is nil. It returns an error wrapping
// ErrBadOption when an option's value is invalid or base is itself a
// *Transport (its retries would multiply).
func New(base http.RoundTripper, opts ...Option) (*Transport, error) {
	if base == nil {
		base = http.DefaultTransport
	}
	if _, ok := base.(*Transport); ok {
		return nil, badOption("base is already an *idemclient.Transport")
	}
	t := &Transport{base: base, cfg: defaultConfig()}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&t.cfg); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// NewClient returns an *http.Client whose transport is New(nil, opts...).
// It has no Timeout; set one to bound a logical request with all its
// attempts and waits.
//
//	client, err := idemclient.NewClient(idemclient.WithMaxAttempts(3))
//	resp, err := client.Post(url, "application/json", strings.NewReader(order))
func NewClient(opts ...Option) (*http.Client, error) {
	t, err := New(nil, opts...)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: t}, nil
}

// CloseIdleConnections closes the idle connections of the base transport,
// if it has that method, so http.Client.CloseIdleConnections works through
// a Transport.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends req, and sends it again with the same key and body while
// the answer is retryable and the limits allow. It does not modify req:
// each attempt is a clone carrying the key. The final response's Request
// is the last attempt's clone, and ResultOf reports on it. A protected
// request whose last attempt got no response fails with an *Error, and so
// does one never sent (Attempts 0): its context had ended, or reading its
// body to buffer it failed or outlasted the context. RoundTrip then closes
// the body and returns at once, though a Read of it that ignores Close
// may go on in the background.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !slices.Contains(t.cfg.methods, req.Method) {
		return t.base.RoundTrip(req)
	}
	key, callers := req.Header.Get(t.cfg.keyHeader), len(req.Header.Values(t.cfg.keyHeader)) > 0
	if !callers {
		key = t.cfg.keyFunc(req)
	}
	if key == "" {
		return t.base.RoundTrip(req) // no key: sent once, as it is
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &Error{Key: key, Err: err}
	}
	b, err := newBody(req, t.cfg.maxBuffered)
	if err != nil {
		return nil, &Error{Key: key, Err: err}
	}
	proto := req.Clone(ctx)
	if proto.Header == nil {
		proto.Header = make(http.Header)
	}
	if !callers {
		proto.Header.Set(t.cfg.keyHeader, key)
	}
	c := &call{t: t, ctx: ctx, proto: proto, key: key, body: b, retries: t.cfg.retry.Begin(ctx)}
	return c.run()
}

// call is one logical request in progress.
type call struct {
	t       *Transport
	ctx     context.Context
	proto   *http.Request // the caller's request cloned, with the key; never sent itself
	key     string
	body    body
	retries *Retries
}

// run is the retry loop: send, classify, then either return the answer or
// discard it, wait and send again.
func (c *call) run() (*http.Response, error) {
	next := c.body.first
	for n := 1; ; n++ {
		req := c.proto.WithContext(c.ctx) // a shallow copy per attempt: the previous one may still be in use
		req.Body, req.GetBody, req.ContentLength = next, c.body.get, c.body.length
		began := time.Now()
		resp, err := c.t.base.RoundTrip(req)
		a := Attempt{Request: req, Key: c.key, Number: n, Duration: time.Since(began)}
		if resp != nil && resp.Body == nil {
			resp.Body = http.NoBody // as http.Client does
		}
		if err != nil && resp != nil { // a RoundTripper breaking its contract
			resp.Body.Close()
			resp = nil
		}
		retryable, inProgress, hint := false, false, time.Duration(-1)
		if err == nil {
			a.Status, a.Replayed = resp.StatusCode, resp.Header.Get(c.t.cfg.replayHeader) == "true"
			retryable, inProgress, hint, err = c.classify(resp, a.Replayed)
			if err != nil { // the 409's body could not be read
				resp.Body.Close()
				resp, a.Status = nil, 0
			}
		}
		if err != nil {
			a.Err = err
			retryable = retryableError(c.ctx, err)
		}
		if wait, ok := c.retries.Next(retryable, inProgress, hint); ok && c.body.get != nil {
			if next, ok = c.nextBody(); ok {
				a.Retry, a.Wait = true, wait
			}
		}
		if h := c.t.cfg.onAttempt; h != nil {
			h(a)
		}
		if !a.Retry {
			return c.finish(n, resp, err)
		}
		if resp != nil {
			discard(resp)
		}
		if err := c.retries.Wait(a.Wait); err != nil {
			if next != nil {
				next.Close()
			}
			return nil, &Error{Key: c.key, Attempts: n, Err: err}
		}
	}
}

// classify tells whether resp may be retried, whether it is an
// in-progress 409, and the wait its Retry-After asks for (-1 without one).
// Only a 409 is read, up to maxPeek bytes.
func (c *call) classify(resp *http.Response, replayed bool) (retry, inProgress bool, hint time.Duration, err error) {
	hint = -1
	switch {
	case replayed:
		return false, false, hint, nil // the stored answer: sending again gets it again
	case resp.StatusCode == http.StatusConflict:
		b, err := peek(resp)
		if err != nil {
			return false, false, hint, err
		}
		retry = c.t.cfg.inProgress(resp, b)
		inProgress = retry
	default:
		retry = retryableStatus(resp.StatusCode)
	}
	if retry {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), resp.Header.Get("Date"), time.Now()); ok {
			hint = d
		}
	}
	return retry, inProgress, hint, nil
}

// nextBody returns the body of the next attempt; ok is false when it
// cannot be had, which ends the retries.
func (c *call) nextBody() (rc io.ReadCloser, ok bool) {
	rc, err := c.body.get()
	return rc, err == nil
}

// finish returns the last attempt's answer, with its Result on the
// response or its error wrapped in an *Error.
func (c *call) finish(n int, resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		return nil, &Error{Key: c.key, Attempts: n, Err: err}
	}
	r := Result{Key: c.key, Attempts: n, Replayed: resp.Header.Get(c.t.cfg.replayHeader) == "true"}
	req := resp.Request
	if req == nil {
		req = c.proto
	}
	resp.Request = withResult(req, r)
	return resp, nil
}
