package idemgrpc

import (
	"context"
	"time"

	idemclient "github.com/idemkit/idem/client"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// UnaryClientInterceptor returns an interceptor that gives each unary call
// one idempotency key (the caller's, from its outgoing metadata, else
// idemclient.NewKey), sends it on every attempt, and retries Unavailable
// and Aborted-with-RetryInfo under the HTTP client's retry policy
// (WithRetry). It returns an error wrapping ErrBadOption for a bad option.
func UnaryClientInterceptor(opts ...ClientOption) (grpc.UnaryClientInterceptor, error) {
	c := &clientConfig{names: names{DefaultKeyMetadata, DefaultReplayMetadata}}
	for _, o := range append([]ClientOption{WithRetry()}, opts...) {
		if o == nil {
			continue
		}
		if err := o.applyClient(c); err != nil {
			return nil, err
		}
	}
	return c.intercept, nil
}

type clientConfig struct {
	names
	protect func(fullMethod string) bool
	retry   *idemclient.RetryPolicy
}

// WithMethods sets which unary methods the client interceptor protects, by
// full method name; the others pass through untouched. Default: all.
func WithMethods(protect func(fullMethod string) bool) ClientOption {
	return clientOption(func(c *clientConfig) error { c.protect = protect; return notNil(protect == nil, "method filter") })
}

// WithRetry sets the retry policy with the HTTP client's options, whose
// defaults it shares: idemclient.WithMaxAttempts, WithBudget, WithBackoff
// and WithRetryAfterCap (the longest wait a RetryInfo may ask for).
func WithRetry(opts ...idemclient.Option) ClientOption {
	return clientOption(func(c *clientConfig) (err error) {
		if c.retry, err = idemclient.NewRetryPolicy(opts...); err != nil {
			return badOption("WithRetry: %w", err)
		}
		return nil
	})
}

// Result is what happened to one logical call: its key, its attempts, and
// whether the last answer was a replay (idempotency-replayed: true).
type Result = idemclient.Result

// Report returns a call option that fills r once a call through the client
// interceptor ends, whatever its outcome; an unprotected call leaves it.
// When a call has several, the last non-nil one is filled; Report(nil) is
// ignored.
func Report(r *Result) grpc.CallOption { return reportOption{r: r} }

type reportOption struct {
	grpc.EmptyCallOption
	r *Result
}

func (c *clientConfig) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if c.protect != nil && !c.protect(method) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	key := ""
	if vals := md.Get(c.keyMD); len(vals) == 0 {
		key = idemclient.NewKey()
		ctx = metadata.AppendToOutgoingContext(ctx, c.keyMD, key)
	} else if key = vals[0]; key == "" {
		return invoker(ctx, method, req, reply, cc, opts...) // the caller's empty key: sent once, as it is
	}
	report := new(Result) // Report's, if given
	for _, o := range opts {
		if r, ok := o.(reportOption); ok && r.r != nil {
			report = r.r
		}
	}
	var hdr metadata.MD
	opts = append(opts[:len(opts):len(opts)], grpc.Header(&hdr))
	retries := c.retry.Begin(ctx)
	for n := 1; ; n++ {
		hdr = nil
		err := invoker(ctx, method, req, reply, cc, opts...)
		wait, ok := retries.Next(c.classify(ctx, err, hdr))
		if !ok {
			*report = Result{Key: key, Attempts: n, Replayed: c.replayed(hdr)}
			return err
		}
		if err := retries.Wait(wait); err != nil {
			*report = Result{Key: key, Attempts: n}
			return status.FromContextError(err).Err()
		}
	}
}

func (c *clientConfig) replayed(md metadata.MD) bool {
	v := md.Get(c.replayMD)
	return len(v) == 1 && v[0] == "true"
}

// classify tells whether an attempt's error may be retried, whether it
// says the key is in flight, and its RetryInfo's wait (-1 without one).
func (c *clientConfig) classify(ctx context.Context, err error, hdr metadata.MD) (retry, inFlight bool, hint time.Duration) {
	st, _ := status.FromError(err) // nil for nil, Unknown for an error that is not a status
	if code := st.Code(); ctx.Err() != nil || c.replayed(hdr) || code != codes.Unavailable && code != codes.Aborted {
		return false, false, -1
	}
	hint, hasInfo := -1, false
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			if hasInfo = true; d.GetRetryDelay().IsValid() {
				hint = max(d.GetRetryDelay().AsDuration(), 0)
			}
		case *errdetails.ErrorInfo:
			inFlight = inFlight || d.GetDomain() == ErrorDomain && d.GetReason() == ReasonInFlight
		}
	}
	return st.Code() == codes.Unavailable || hasInfo, inFlight && hasInfo && st.Code() == codes.Aborted, hint
}
