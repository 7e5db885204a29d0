package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of the engine's options.
const (
	DefaultKeyHeader       = "Idempotency-Key"
	DefaultReplayHeader    = "Idempotent-Replayed"
	DefaultLease           = 15 * time.Second // with the heartbeat; see WithLease
	DefaultLeaseNoBeat     = 5 * time.Minute  // without it
	DefaultRetryAfter      = time.Second
	DefaultCompletionRetry = time.Minute
	DefaultMaxPendingBytes = 64 << 20
	DefaultRetention       = 24 * time.Hour
	DefaultMaxRequestBody  = 1 << 20
	DefaultMaxResponseBody = 1 << 20
	DefaultStoreTimeout    = 2 * time.Second
	DefaultProblemTypeBase = "https://github.com/idemkit/idem/blob/main/docs/problems.md#"

	// MaxLifetime bounds the lease and the retention: ten years, far
	// below what any store's time arithmetic can hold.
	MaxLifetime = 10 * 365 * 24 * time.Hour
)

// HeaderBodyOmitted is set to "true" on a replay of a response whose body
// was larger than the response cap and was not stored.
const HeaderBodyOmitted = "Idempotent-Body-Omitted"

// ErrBadOption is wrapped by every error New returns for a bad option.
var ErrBadOption = errors.New("idem: bad option")

// An Option configures an Engine: what every transport shares (the
// store's lease, retention and timeouts, the heartbeat, waiting, the
// observers, the clock, failing open, the keys' rules, sealing and the
// replay cache). Options are applied in order; each documents its
// default. What only HTTP requests have (the key header, the methods,
// the bodies, the namespace and fingerprint functions, the release rule)
// is an HTTPOption, given where the middleware is built.
type Option func(*config) error

type config struct {
	lease              time.Duration // 0 until resolved in New
	retention          time.Duration
	storeTimeout       time.Duration
	failOpen           bool
	wait               time.Duration
	heartbeat          time.Duration // 0: derived from the lease (beatEvery)
	failover           time.Duration // the store's FailoverTime, resolved in New
	beat               bool          // resolved in New
	beatSet            bool          // WithHeartbeat was given
	retryAfter         time.Duration
	completionRetry    time.Duration
	completionRetrySet bool
	maxPendingBytes    int64
	requireNamespace   bool
	ring               *keyRing // WithEncryption
	redact             func(context.Context, Response) Response
	replayHook         func(context.Context, *Response, time.Time)
	keyValidator       func(key string) error
	globalKeys         bool          // WithGlobalKeys
	cacheBytes         int64         // WithReplayCache
	cacheTTL           time.Duration // WithReplayCache
	observer           Observer
	storeObserver      StoreObserver
	clock              func() time.Time
}

func defaultConfig() config {
	return config{
		retention:       DefaultRetention,
		retryAfter:      DefaultRetryAfter,
		completionRetry: DefaultCompletionRetry,
		maxPendingBytes: DefaultMaxPendingBytes,
		storeTimeout:    DefaultStoreTimeout,
		observer:        SlogObserver(nil),
		clock:           time.Now,
	}
}

func badOption(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadOption}, args...)...)
}

// WithLease sets how long an in-flight claim blocks other requests with the
// same key if it is neither completed nor released (its process died).
// New refuses a lease longer than the engine's retention (WithRetention);
// a route whose TTL is shorter gives its claims a lease of its TTL.
// Default: 15 seconds when the heartbeat keeps running claims alive (the
// store implements Extender; see WithHeartbeat), otherwise 5 minutes,
// capped at the retention.
//
// With the heartbeat, a beat comes up to 1.5 intervals after the last
// one (half a lease with the default interval) and its Extend may take up
// to the store timeout: keep the lease above the two together (with the
// defaults, 7.5 s + 2 s of 15 s), or a store that answers slowly, though
// within its timeout, lets the lease end while the work runs, and another
// instance may take the key over. New does not check this.
func WithLease(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 || d > MaxLifetime {
			return badOption("lease %v is not between 0 and %v", d, MaxLifetime)
		}
		c.lease = d
		return nil
	}
}

// WithRetention sets how long a completed response is replayed (the TTL).
// Routes may override it with [TTL]. Default: 24 hours.
func WithRetention(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 || d > MaxLifetime {
			return badOption("retention %v is not between 0 and %v", d, MaxLifetime)
		}
		c.retention = d
		return nil
	}
}

// WithStoreTimeout sets the time limit of each store call. Default: 2s.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return badOption("store timeout %v is not positive", d)
		}
		c.storeTimeout = d
		return nil
	}
}

// WithFailOpen makes a failing store run the handler unprotected (reported
// as OutcomeStoreFailure with Event.FailedOpen) instead of answering 503.
// Such a run has no claim and, with an exactly-once store, no transaction.
// A request that found its key in flight and is waiting (WithWait) is
// never run unprotected: a store failure then answers 409. Neither is a
// request whose key holds a record the engine cannot read
// (ErrCorruptRecord): the store answered, and the record may say the work
// was done. Default: fail closed (503 with Retry-After).
func WithFailOpen() Option {
	return func(c *config) error { c.failOpen = true; return nil }
}

// failsOpen reports whether a request whose store call failed with err
// runs unprotected.
func (e *Engine) failsOpen(err error) bool {
	return e.cfg.failOpen && !errors.Is(err, ErrCorruptRecord)
}

// WithWait turns on wait mode: a request that finds its key in progress
// waits up to limit for the first request to finish, then replays its
// response, or runs itself if the first released the key, or answers 409.
// It wakes through the store's Notifier when there is one and polls with
// backoff otherwise. A duplicate of a request this engine is running
// waits on that request itself, with no store call, and replays its
// answer when that request ends (for a streamed response, once it is
// sent); if it ends without a stored answer, the duplicate goes on
// waiting on the store. The limit counts the whole wait. While this
// engine retries a key's completion in the background, a duplicate waits
// for it and never claims the key. Default: off (409 at once).
func WithWait(limit time.Duration) Option {
	return func(c *config) error {
		if limit <= 0 {
			return badOption("wait limit %v is not positive", limit)
		}
		c.wait = limit
		return nil
	}
}

// WithHeartbeat sets how often the engine extends the lease of a running
// request through the store's Extender, so a handler of any length keeps
// its claim while a crashed one frees its key within the lease; 0 turns
// the heartbeat off. A claim found lost is not completed. Each beat is one
// Extend call per request in flight; a handler shorter than a beat costs
// none. New fails when interval is positive and the store has no
// Extender. Default: a third of the lease in effect, when the store
// implements Extender; off otherwise.
func WithHeartbeat(interval time.Duration) Option {
	return func(c *config) error {
		if interval < 0 {
			return badOption("heartbeat interval %v is negative", interval)
		}
		c.heartbeat, c.beat, c.beatSet = interval, interval > 0, true
		return nil
	}
}

// WithRetryAfter sets the Retry-After hint of a 409 for a request still in
// flight (never more than its lease left) and of a 503 for a failing
// store, rounded up to whole seconds, at least 1. Default: 1 second.
func WithRetryAfter(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 || d > MaxLifetime {
			return badOption("retry-after hint %v is not between 0 and %v", d, MaxLifetime)
		}
		c.retryAfter = d
		return nil
	}
}

// WithCompletionRetry sets how long the engine keeps trying, in the
// background, to store a response whose Complete failed after the handler
// ran (the store blipped): the client gets its response at once, the claim
// is kept alive, and a retry replays once the record lands. 0 turns this
// off: the key then frees at the lease end and a retry runs again. See
// Engine.Close for shutdown. Default: 1 minute.
func WithCompletionRetry(limit time.Duration) Option {
	return func(c *config) error {
		if limit < 0 || limit > MaxLifetime {
			return badOption("completion retry %v is not between 0 and %v", limit, MaxLifetime)
		}
		c.completionRetry, c.completionRetrySet = limit, true
		return nil
	}
}

// WithMaxPendingBytes bounds the memory of the background work: stored
// responses waiting to be completed (body and headers) and releases
// waiting to land (a few hundred bytes each). When a new one would pass
// the bound, the oldest are dropped; a dropped key frees at its lease
// end. Default: 64 MiB.
func WithMaxPendingBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return badOption("max pending bytes %d is not positive", n)
		}
		c.maxPendingBytes = n
		return nil
	}
}

// WithObserver sets the function that receives one Event per request.
// Default: SlogObserver(slog.Default()).
func WithObserver(fn Observer) Option {
	return func(c *config) error {
		if fn == nil {
			return badOption("nil observer")
		}
		c.observer = fn
		return nil
	}
}

// WithStoreObserver sets the function told of every store call, for
// latency metrics by operation. Default: none.
func WithStoreObserver(fn StoreObserver) Option {
	return func(c *config) error {
		if fn == nil {
			return badOption("nil store observer")
		}
		c.storeObserver = fn
		return nil
	}
}

// WithLogger is WithObserver(SlogObserver(logger)).
func WithLogger(logger *slog.Logger) Option {
	return WithObserver(SlogObserver(logger))
}

// WithClock sets the clock whose time the engine passes to every store
// call. Outside tests, give it one that keeps time.Now's monotonic reading
// (see "Time" in the package doc). Default: time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return badOption("nil clock")
		}
		c.clock = now
		return nil
	}
}

// WithRequiredNamespace refuses every protected request whose namespace
// is empty instead of scoping its key globally: an HTTP request gets 403
// (OutcomeNoNamespace, logged at warn level), a gRPC call
// PermissionDenied, and Do and Start return ErrNamespaceRequired. Use it
// in a multi-tenant service, so that a request that reaches idem without
// an identity (idem mounted before the authentication middleware, or an
// anonymous client) can never share a key, and a stored response, with
// another client. On HTTP the namespace comes from WithNamespace (an
// HTTPOption), on gRPC from its adapter's namespace option. Default: an
// empty namespace is global.
func WithRequiredNamespace() Option {
	return func(c *config) error { c.requireNamespace = true; return nil }
}

// WithKeyValidator sets a check every key must pass besides the built-in
// rules (1 to 255 printable ASCII characters): a key fn refuses gets 400
// invalid-key with fn's error as the detail (Do: an error wrapping
// ErrInvalidKey). For example, UUIDs only:
//
//	idem.WithKeyValidator(func(k string) error {
//		_, err := uuid.Parse(k)
//		return err
//	})
//
// Default: none.
func WithKeyValidator(fn func(key string) error) Option {
	return func(c *config) error {
		if fn == nil {
			return badOption("nil key validator")
		}
		c.keyValidator = fn
		return nil
	}
}

// WithGlobalKeys makes a key name one request across every method and
// route of its namespace, as Stripe's API does: the same key sent to
// another route or with another method is refused with 422, where by
// default it would be another key. The default fingerprint includes the
// method and path, so it tells them apart; a WithFingerprint function
// must too, as must the Op.Fingerprint of a transport on Start (with
// WithGlobalKeys, Start scopes by Op.Namespace alone). It has no effect
// on Do, whose keys stay per kind and name.
// Default: keys are scoped by method and route template.
func WithGlobalKeys() Option {
	return func(c *config) error { c.globalKeys = true; return nil }
}
