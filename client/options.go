package idemclient

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	idem "github.com/idemkit/idem/core"
)

// Defaults of the transport's options.
const (
	DefaultKeyHeader       = "Idempotency-Key"
	DefaultReplayHeader    = "Idempotent-Replayed"
	DefaultMaxAttempts     = 5
	DefaultBudget          = 30 * time.Second
	DefaultBackoffBase     = 100 * time.Millisecond
	DefaultBackoffCap      = 5 * time.Second
	DefaultRetryAfterCap   = 10 * time.Second
	DefaultMaxBufferedBody = 1 << 20
)

// ErrBadOption is wrapped by every error New, NewClient and NewRetryPolicy
// return for a bad option. It wraps idem.ErrBadOption, as every idem
// module's does.
var ErrBadOption = fmt.Errorf("idemclient: %w", idem.ErrBadOption)

// An Option configures a Transport. Options are applied in order; a nil
// Option is ignored. Each documents its default.
type Option func(*config) error

type config struct {
	methods      []string
	keyHeader    string
	replayHeader string
	keyFunc      func(*http.Request) string
	retry        RetryPolicy
	maxBuffered  int64
	inProgress   func(resp *http.Response, body []byte) bool
	onAttempt    func(Attempt)
	retryOnly    bool // NewRetryPolicy: the options of other settings are refused
}

func defaultConfig() config {
	return config{
		methods:      []string{http.MethodPost, http.MethodPatch},
		keyHeader:    DefaultKeyHeader,
		replayHeader: DefaultReplayHeader,
		keyFunc:      func(*http.Request) string { return NewKey() },
		retry:        defaultRetryPolicy(),
		maxBuffered:  DefaultMaxBufferedBody,
		inProgress:   InProgress,
	}
}

// httpOnly wraps o, the HTTP option called name, so that NewRetryPolicy
// refuses it.
func httpOnly(name string, o Option) Option {
	return func(c *config) error {
		if c.retryOnly {
			return badOption("%s does not apply to a RetryPolicy", name)
		}
		return o(c)
	}
}

func badOption(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadOption}, args...)...)
}

// WithMethods sets the methods the transport protects: requests with any
// other method pass through to the base transport untouched and are never
// retried. GET, HEAD, OPTIONS and TRACE are safe methods; naming one is an
// error. Default: POST and PATCH.
func WithMethods(methods ...string) Option {
	return httpOnly("WithMethods", func(c *config) error {
		if len(methods) == 0 {
			return badOption("no methods")
		}
		ms := make([]string, 0, len(methods))
		for _, m := range methods {
			m = strings.ToUpper(m)
			switch {
			case m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions || m == http.MethodTrace:
				return badOption("%s is a safe method and needs no key", m)
			case !validToken(m):
				return badOption("method %q is not a valid method name", m)
			}
			ms = append(ms, m)
		}
		c.methods = ms
		return nil
	})
}

// WithKeyHeader sets the request header that carries the key.
// Default: Idempotency-Key.
func WithKeyHeader(name string) Option {
	return httpOnly("WithKeyHeader", func(c *config) error {
		if !validToken(name) {
			return badOption("key header %q is not a valid header name", name)
		}
		c.keyHeader = http.CanonicalHeaderKey(name)
		return nil
	})
}

// WithReplayHeader sets the response header whose value "true" marks a
// replayed response (Result.Replayed). Default: Idempotent-Replayed.
func WithReplayHeader(name string) Option {
	return httpOnly("WithReplayHeader", func(c *config) error {
		if !validToken(name) {
			return badOption("replay header %q is not a valid header name", name)
		}
		c.replayHeader = http.CanonicalHeaderKey(name)
		return nil
	})
}

// WithKeyFunc sets how the key of a protected request without a key header
// is made; fn is called once per logical request, before the first
// attempt. An empty key means none: the request is sent once, as it is,
// and never retried. To retry only requests that carry the caller's key:
//
//	idemclient.WithKeyFunc(func(*http.Request) string { return "" })
//
// Default: NewKey, a random UUID.
func WithKeyFunc(fn func(*http.Request) string) Option {
	return httpOnly("WithKeyFunc", func(c *config) error {
		if fn == nil {
			return badOption("nil key function")
		}
		c.keyFunc = fn
		return nil
	})
}

// WithMaxAttempts sets how many times one logical request is sent at most,
// the first included; 1 turns retries off. Attempts answered with an
// in-progress 409 do not count: the first attempt is still running, and
// the budget bounds how long the transport waits for it. Default: 5.
func WithMaxAttempts(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return badOption("max attempts %d is less than 1", n)
		}
		c.retry.maxAttempts = n
		return nil
	}
}

// WithBudget sets the total time one logical request may take across its
// attempts: a retry whose wait would end later than the budget after the
// first attempt began is not made, and the last answer is returned. It
// bounds the waits, not an attempt in flight; the request's context does
// that. Default: 30 seconds.
func WithBudget(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return badOption("budget %v is not positive", d)
		}
		c.retry.budget = d
		return nil
	}
}

// WithBackoff sets the exponential backoff used when an answer has no
// Retry-After: after the n-th failed attempt the transport waits a random
// time between 0 and min(maxWait, base·2^(n-1)) ("full jitter"). Attempts
// answered in progress are counted apart, and wait at least base.
// Default: 100ms and 5s.
func WithBackoff(base, maxWait time.Duration) Option {
	return func(c *config) error {
		if base <= 0 || maxWait < base {
			return badOption("backoff base %v and cap %v: want 0 < base <= cap", base, maxWait)
		}
		c.retry.backoffBase, c.retry.backoffCap = base, maxWait
		return nil
	}
}

// WithRetryAfterCap sets the longest wait a Retry-After header can ask for;
// a longer one is cut to the cap. Default: 10 seconds.
func WithRetryAfterCap(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return badOption("Retry-After cap %v is not positive", d)
		}
		c.retry.retryAfterCap = d
		return nil
	}
}

// WithMaxBufferedBody sets how many bytes of a request body without GetBody
// the transport buffers so it can send it again. A longer body, or any body
// without GetBody when n is 0, is sent once and never retried; with
// math.MaxInt64 every body is buffered, whatever its length.
// Default: 1 MiB.
func WithMaxBufferedBody(n int64) Option {
	return httpOnly("WithMaxBufferedBody", func(c *config) error {
		if n < 0 {
			return badOption("max buffered body %d is negative", n)
		}
		c.maxBuffered = n
		return nil
	})
}

// WithInProgress replaces the test that tells an in-progress 409 (retried)
// from the application's own 409 (returned). fn gets the response and up
// to the first 4 KiB of its body, and must not read resp.Body. It is never
// called for a replayed response, which is always final. Default:
// InProgress.
func WithInProgress(fn func(resp *http.Response, body []byte) bool) Option {
	return httpOnly("WithInProgress", func(c *config) error {
		if fn == nil {
			return badOption("nil in-progress test")
		}
		c.inProgress = fn
		return nil
	})
}

// WithOnAttempt sets a function called after each attempt, on the
// goroutine of the request, once the transport has decided whether to
// retry; use it for logs and metrics, and keep it fast. Default: none.
func WithOnAttempt(fn func(Attempt)) Option {
	return httpOnly("WithOnAttempt", func(c *config) error {
		if fn == nil {
			return badOption("nil attempt hook")
		}
		c.onAttempt = fn
		return nil
	})
}

// validToken reports whether s is an RFC 9110 token, as method and header
// names must be.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
