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

type clientConfig struct {
	names
	protect func(fullMethod string) bool
	retry   *idemclient.RetryPolicy
}

// WithMethods sets which unary methods the client interceptor protects, by
// full method name; the others pass through untouched, with no key and no
// retry. Default: every unary method.
func WithMethods(protect func(fullMethod string) bool) ClientOption {
	return clientOption(func(c *clientConfig) error {
		if protect == nil {
			return badOption("nil method filter")
		}
		c.protect = protect
		return nil
	})
}

// WithRetry sets the client interceptor's retry policy with the options
// of the HTTP client module, which it shares: idemclient.WithMaxAttempts,
// WithBudget, WithBackoff and WithRetryAfterCap (the longest wait a
// RetryInfo can ask for), with the same defaults. Another idemclient
// option is an error wrapping ErrBadOption.
//
//	idemgrpc.WithRetry(idemclient.WithMaxAttempts(4), idemclient.WithBudget(10*time.Second))
func WithRetry(opts ...idemclient.Option) ClientOption {
	return clientOption(func(c *clientConfig) (err error) {
		if c.retry, err = idemclient.NewRetryPolicy(opts...); err != nil {
			return badOption("WithRetry: %w", err)
		}
		return nil
	})
}

// UnaryClientInterceptor returns an interceptor that gives each unary call
// one idempotency key (the caller's, if its outgoing metadata has one,
// else idemclient.NewKey), sends it on every attempt, and retries
// Unavailable and Aborted-with-RetryInfo under the retry policy
// (WithRetry) and the call's deadline; other codes are returned at once.
// It returns an error wrapping ErrBadOption for a bad option. Report
// tells what happened.
//
//	idemUnary, err := idemgrpc.UnaryClientInterceptor(idemgrpc.WithRetry(idemclient.WithMaxAttempts(4)))
//	conn, err := grpc.NewClient(addr, grpc.WithChainUnaryInterceptor(idemUnary), creds)
func UnaryClientInterceptor(opts ...ClientOption) (grpc.UnaryClientInterceptor, error) {
	c := &client{clientConfig{names: names{DefaultKeyMetadata, DefaultReplayMetadata}}}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyClient(&c.clientConfig); err != nil {
			return nil, err
		}
	}
	if c.retry == nil {
		c.retry, _ = idemclient.NewRetryPolicy() // the defaults: no error
	}
	return c.intercept, nil
}

// Result is what happened to one logical call, as idemclient reports a
// request's: the key every attempt carried, how many attempts were made,
// and whether the last answer's header metadata carries
// idempotency-replayed: true (the server answered from its store).
type Result = idemclient.Result

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

type client struct{ clientConfig }

func (c *client) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if c.protect != nil && !c.protect(method) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	report := new(Result) // filled and dropped without Report
	for _, o := range opts {
		if r, ok := o.(reportOption); ok {
			report = r.r
		}
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	key := ""
	if vals := md.Get(c.keyMD); len(vals) > 0 {
		if key = vals[0]; key == "" {
			return invoker(ctx, method, req, reply, cc, opts...) // the caller's empty key: sent once, as it is
		}
	} else {
		key = idemclient.NewKey()
		ctx = metadata.AppendToOutgoingContext(ctx, c.keyMD, key)
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

func (c *client) replayed(md metadata.MD) bool {
	v := md.Get(c.replayMD)
	return len(v) == 1 && v[0] == "true"
}

// classify tells whether an attempt's error may be retried, whether it
// says the key is in flight, and the wait its RetryInfo asks for (-1
// without one).
func (c *client) classify(ctx context.Context, err error, hdr metadata.MD) (retry, inFlight bool, hint time.Duration) {
	st, ok := status.FromError(err)
	if err == nil || !ok || ctx.Err() != nil || c.replayed(hdr) {
		return false, false, -1
	}
	hint, hasInfo := -1, false
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
		return hasInfo, inFlight && hasInfo, hint
	}
	return false, false, -1
}
