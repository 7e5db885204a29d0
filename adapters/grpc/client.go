package idemgrpc

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// UnaryClientInterceptor returns an interceptor that gives each unary call
// one idempotency key (the caller's, if its outgoing metadata has one,
// else NewKey), sends it on every attempt, and retries Unavailable and
// Aborted-with-RetryInfo with backoff within the limits and the call's
// deadline; other codes are returned at once. It returns an error
// wrapping ErrBadOption for a bad option. Report tells what happened.
//
//	idemUnary, err := idemgrpc.UnaryClientInterceptor(idemgrpc.WithMaxAttempts(4))
//	conn, err := grpc.NewClient(addr, grpc.WithChainUnaryInterceptor(idemUnary), creds)
func UnaryClientInterceptor(opts ...ClientOption) (grpc.UnaryClientInterceptor, error) {
	cfg := defaultClientConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyClient(&cfg); err != nil {
			return nil, err
		}
	}
	c := &client{cfg: cfg, jitter: fullJitter}
	return c.intercept, nil
}

// Result is what happened to one logical call; see Report.
type Result struct {
	// Key is the idempotency key every attempt carried.
	Key string
	// Attempts is how many times the call was sent; 1 when it was not
	// retried.
	Attempts int
	// Replayed reports that the last answer's header metadata carries
	// idempotency-replayed: true: the server answered from its store.
	Replayed bool
}

// Report returns a call option that fills r once a call through the client
// interceptor ends, whatever its outcome. A call the interceptor does not
// protect (no interceptor, WithMethods, an empty caller key) leaves r as
// it is.
//
//	var r idemgrpc.Result
//	resp, err := orders.Create(ctx, req, idemgrpc.Report(&r))
func Report(r *Result) grpc.CallOption { return reportOption{r: r} }

type reportOption struct {
	grpc.EmptyCallOption
	r *Result
}

// NewKey returns a new random key: a version 4 UUID in its text form, from
// crypto/rand. It is the client interceptor's key.
func NewKey() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

type client struct {
	cfg    clientConfig
	jitter func(time.Duration) time.Duration
}

func fullJitter(d time.Duration) time.Duration { return rand.N(d + 1) }

func (c *client) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if c.cfg.protect != nil && !c.cfg.protect(method) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	var report *Result
	for _, o := range opts {
		if r, ok := o.(reportOption); ok {
			report = r.r
		}
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	key := ""
	if vals := md.Get(c.cfg.keyMD); len(vals) > 0 {
		if key = vals[0]; key == "" {
			return invoker(ctx, method, req, reply, cc, opts...) // the caller's empty key: sent once, as it is
		}
	} else {
		key = NewKey()
		ctx = metadata.AppendToOutgoingContext(ctx, c.cfg.keyMD, key)
	}
	var hdr metadata.MD
	opts = append(opts[:len(opts):len(opts)], grpc.Header(&hdr))
	start := time.Now()
	spent := 0 // attempts that count toward the limit
	for n := 1; ; n++ {
		hdr = nil
		err := invoker(ctx, method, req, reply, cc, opts...)
		retry, inFlight, hint := c.classify(ctx, err, hdr)
		if !inFlight {
			spent++
		}
		var wait time.Duration
		if retry {
			wait = c.wait(n, hint, inFlight)
			retry = c.allowed(ctx, start, spent, wait)
		}
		if !retry {
			if report != nil {
				*report = Result{Key: key, Attempts: n, Replayed: replayedMD(hdr, c.cfg.replayMD)}
			}
			return err
		}
		if werr := sleep(ctx, wait); werr != nil {
			if report != nil {
				*report = Result{Key: key, Attempts: n}
			}
			return status.FromContextError(werr).Err()
		}
	}
}

func replayedMD(md metadata.MD, name string) bool {
	v := md.Get(name)
	return len(v) == 1 && v[0] == "true"
}

// classify tells whether an attempt's error may be retried, whether it
// says the key is in flight, and the wait its RetryInfo asks for (-1
// without one).
func (c *client) classify(ctx context.Context, err error, hdr metadata.MD) (retry, inFlight bool, hint time.Duration) {
	hint = -1
	if err == nil || ctx.Err() != nil || replayedMD(hdr, c.cfg.replayMD) {
		return false, false, hint
	}
	st, ok := status.FromError(err)
	if !ok {
		return false, false, hint
	}
	hasInfo := false
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			hasInfo = true
			if d.GetRetryDelay() != nil && d.GetRetryDelay().IsValid() {
				hint = max(d.GetRetryDelay().AsDuration(), 0)
			}
		case *errdetails.ErrorInfo:
			inFlight = inFlight || d.GetDomain() == ErrorDomain && d.GetReason() == ReasonInFlight
		}
	}
	switch st.Code() {
	case codes.Unavailable:
		return true, false, hint
	case codes.Aborted:
		if hasInfo {
			return true, inFlight, hint
		}
	}
	return false, false, -1
}

// wait returns the wait before retry n: the RetryInfo delay up to its cap,
// else the backoff. In-flight polls, which the attempt limit does not
// bound, are at least the backoff base apart.
func (c *client) wait(n int, hint time.Duration, inFlight bool) time.Duration {
	if hint < 0 {
		d := c.cfg.backoffBase
		for i := 1; i < n && d < c.cfg.backoffCap; i++ {
			d *= 2
		}
		return c.jitter(min(d, c.cfg.backoffCap))
	}
	d := min(hint, c.cfg.delayCap)
	if inFlight {
		d = max(d, c.cfg.backoffBase)
	}
	return d
}

// allowed reports whether another attempt may follow after wait within
// the attempt limit, the budget and the call's deadline.
func (c *client) allowed(ctx context.Context, start time.Time, spent int, wait time.Duration) bool {
	if spent >= c.cfg.maxAttempts || ctx.Err() != nil {
		return false
	}
	at := time.Now().Add(wait)
	if at.Sub(start) > c.cfg.budget {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && !at.Before(dl) {
		return false
	}
	return true
}

// sleep waits d or until ctx ends, and returns ctx's error in the second
// case.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
