package idem

import (
	"net/http"
	"strings"
)

// The options of the HTTP transport: the key header, the methods, the
// bodies, the namespace and fingerprint functions, the release rule and
// the headers and problems of the answers.

// WithKeyHeader sets the request header that carries the key.
// Default: Idempotency-Key.
func WithKeyHeader(name string) Option {
	return func(c *config) error {
		if !validHeaderName(name) {
			return badOption("key header %q is not a valid header name", name)
		}
		c.keyHeader = http.CanonicalHeaderKey(name)
		return nil
	}
}

// WithReplayHeader sets the response header, with the value "true", that
// marks a replayed response. Default: Idempotent-Replayed.
func WithReplayHeader(name string) Option {
	return func(c *config) error {
		if !validHeaderName(name) {
			return badOption("replay header %q is not a valid header name", name)
		}
		c.replayHeader = http.CanonicalHeaderKey(name)
		return nil
	}
}

// WithMethods sets the methods the engine protects. GET, HEAD, OPTIONS and
// TRACE are safe methods and are never touched; naming one is an error.
// Default: POST and PATCH.
func WithMethods(methods ...string) Option {
	return func(c *config) error {
		if len(methods) == 0 {
			return badOption("no methods")
		}
		ms := make([]string, 0, len(methods))
		for _, m := range methods {
			m = strings.ToUpper(m)
			switch m {
			case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
				return badOption("%s is a safe method and is never protected", m)
			case "":
				return badOption("empty method")
			}
			ms = append(ms, m)
		}
		c.methods = ms
		return nil
	}
}

// WithOptionalKey makes the key optional by default: a request without one
// runs unprotected (OutcomeSkipped). A route can still require it with
// [Required]. Default: a key is required (400 without one).
func WithOptionalKey() Option {
	return func(c *config) error { c.keyOptional = true; return nil }
}

// WithMaxRequestBody sets the largest request body the engine reads, in
// bytes; a larger body gets 413. Default: 1 MiB.
func WithMaxRequestBody(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return badOption("max request body %d is not positive", n)
		}
		c.maxRequestBody = n
		return nil
	}
}

// WithMaxResponseBody sets the largest response body the engine stores, in
// bytes. A larger response is streamed to the client and stored as its
// status and headers with the body omitted; 0 stores no body at all.
// Default: 1 MiB.
func WithMaxResponseBody(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return badOption("max response body %d is negative", n)
		}
		c.maxResponseBody = n
		return nil
	}
}

// WithProblemTypeBase sets the prefix of the "type" URI in problem
// responses; the problem's name (such as "conflict") is appended.
// Default: DefaultProblemTypeBase.
func WithProblemTypeBase(base string) Option {
	return func(c *config) error {
		if base == "" {
			return badOption("empty problem type base")
		}
		c.problemBase = base
		return nil
	}
}

// WithNamespace sets the function that names the client a request comes
// from (a principal, tenant or API key). Keys are scoped by it, so two
// clients never share a key. An empty namespace is global. Default: global
// for every request.
func WithNamespace(fn func(*http.Request) string) Option {
	return func(c *config) error {
		if fn == nil {
			return badOption("nil namespace function")
		}
		c.namespace = fn
		return nil
	}
}

// WithRequiredNamespace refuses every protected request whose namespace
// is empty instead of scoping its key globally: an HTTP request gets 403
// (OutcomeNoNamespace, logged at warn level), Do returns
// ErrNamespaceRequired. Use it in a multi-tenant service, so that a
// request that reaches idem without an identity (idem mounted before the
// authentication middleware, or an anonymous client) can never share a
// key, and a stored response, with another client. HTTP needs
// WithNamespace. Default: an empty namespace is global.
func WithRequiredNamespace() Option {
	return func(c *config) error { c.requireNamespace = true; return nil }
}

// WithFingerprint replaces the request fingerprint. fn gets the request and
// its body (already read; r.Body must not be read). New refuses it
// together with WithJSONFingerprint. Default: [Fingerprint]
// of the method, r.URL.RequestURI() and the body. The host is not part of
// it: a retry may reach the service by another address (another instance,
// a client-side load balancer). A service that serves different clients
// by host scopes keys by it with WithNamespace.
func WithFingerprint(fn func(r *http.Request, body []byte) string) Option {
	return func(c *config) error {
		if fn == nil {
			return badOption("nil fingerprint function")
		}
		if c.jsonFP != nil {
			return badOption("WithFingerprint and WithJSONFingerprint both given; choose one")
		}
		c.fingerprint = fn
		return nil
	}
}

// WithReleaseRule replaces the rule that decides, from the handler's status
// code, whether the key is released (the response is not stored, a retry
// runs again) rather than stored. Panics and hijacked connections always
// release. Default: [DefaultReleaseRule].
func WithReleaseRule(fn func(status int) bool) Option {
	return func(c *config) error {
		if fn == nil {
			return badOption("nil release rule")
		}
		c.release = fn
		return nil
	}
}

// DefaultReleaseRule releases the key on 5xx and 429, the answers a client
// should retry, and stores every other status.
func DefaultReleaseRule(status int) bool {
	return status >= 500 || status == http.StatusTooManyRequests
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// WithReplayedHeaders turns the stored headers into an allowlist: only
// Content-Type, Content-Encoding, Location, ETag, Cache-Control and the
// names given are stored and replayed (the hop-by-hop, Set-Cookie and
// Date rules still apply). Default: every header but those the engine
// never stores (see Response).
func WithReplayedHeaders(names ...string) Option {
	return func(c *config) error {
		allow := map[string]bool{"Content-Type": true, "Content-Encoding": true, "Location": true, "Etag": true, "Cache-Control": true}
		for _, n := range names {
			if !validHeaderName(n) {
				return badOption("replayed header %q is not a valid header name", n)
			}
			allow[http.CanonicalHeaderKey(n)] = true
		}
		c.replayAllow = allow
		return nil
	}
}
