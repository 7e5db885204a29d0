package idem

import (
	"net/http"
	"strings"
)

// The options of the HTTP transport: the key header, the methods, the
// bodies, the namespace and fingerprint functions, the release rule and
// the headers and problems of the answers. Engine.Middleware,
// Engine.Policy and every HTTP adapter take them beside the RouteOptions;
// Do and gRPC never see them.

// An HTTPOption configures the HTTP transport: Engine.Middleware,
// Engine.Policy and the HTTP adapters take them, each for the routes it
// protects. Every RouteOption is one. The With* constructors check their
// arguments where they are called and panic with an error wrapping
// ErrBadOption on a bad one: like a bad pattern given to http.ServeMux,
// it is a mistake in the program, caught where the routes are declared.
type HTTPOption interface{ applyHTTP(*Policy) }

// httpConfig is the HTTP transport's side of a Policy, shared by the
// policy and its ForRoute overrides.
type httpConfig struct {
	keyHeader       string
	replayHeader    string
	methods         []string
	maxRequestBody  int64
	maxResponseBody int
	problemBase     string
	namespace       func(*http.Request) string
	fingerprint     func(r *http.Request, body []byte) string
	jsonFP          *jsonConfig     // WithJSONFingerprint
	keyField        string          // WithKeyField
	replayAllow     map[string]bool // WithReplayedHeaders; nil: the denylist
	release         func(status int) bool
	routeFunc       func(*http.Request) string // RouteFunc
}

var defaultHTTP = httpConfig{
	keyHeader:       DefaultKeyHeader,
	replayHeader:    DefaultReplayHeader,
	methods:         []string{http.MethodPost, http.MethodPatch},
	maxRequestBody:  DefaultMaxRequestBody,
	maxResponseBody: DefaultMaxResponseBody,
	problemBase:     DefaultProblemTypeBase,
	release:         DefaultReleaseRule,
}

type httpOption func(*httpConfig)

func (o httpOption) applyHTTP(p *Policy) { o(p.h) }

// failIf returns the bad-option error format describes when bad holds.
func failIf(bad bool, format string, args ...any) error {
	if bad {
		return badOption(format, args...)
	}
	return nil
}

// mustHTTP returns set as an HTTPOption, or panics with the error of a
// bad argument.
func mustHTTP(err error, set func(*httpConfig)) HTTPOption {
	if err != nil {
		panic(err)
	}
	return httpOption(set)
}

// WithKeyHeader sets the request header that carries the key.
// Default: Idempotency-Key.
func WithKeyHeader(name string) HTTPOption {
	return mustHTTP(failIf(!validHeaderName(name), "key header %q is not a valid header name", name),
		func(c *httpConfig) { c.keyHeader = http.CanonicalHeaderKey(name) })
}

// WithReplayHeader sets the response header, with the value "true", that
// marks a replayed response. Default: Idempotent-Replayed.
func WithReplayHeader(name string) HTTPOption {
	return mustHTTP(failIf(!validHeaderName(name), "replay header %q is not a valid header name", name),
		func(c *httpConfig) { c.replayHeader = http.CanonicalHeaderKey(name) })
}

// WithMethods sets the methods the middleware protects. GET, HEAD, OPTIONS
// and TRACE are safe methods and are never touched; naming one is an
// error. Default: POST and PATCH.
func WithMethods(methods ...string) HTTPOption {
	ms, err := checkMethods(methods)
	return mustHTTP(err, func(c *httpConfig) { c.methods = ms })
}

func checkMethods(methods []string) ([]string, error) {
	if len(methods) == 0 {
		return nil, badOption("no methods")
	}
	ms := make([]string, 0, len(methods))
	for _, m := range methods {
		m = strings.ToUpper(m)
		switch m {
		case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
			return nil, badOption("%s is a safe method and is never protected", m)
		case "":
			return nil, badOption("empty method")
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// WithMaxRequestBody sets the largest request body the middleware reads,
// in bytes; a larger body gets 413. Default: 1 MiB.
func WithMaxRequestBody(n int64) HTTPOption {
	return mustHTTP(failIf(n <= 0, "max request body %d is not positive", n), func(c *httpConfig) { c.maxRequestBody = n })
}

// WithMaxResponseBody sets the largest response body the middleware
// stores, in bytes. A larger response is streamed to the client and
// stored as its status and headers with the body omitted; 0 stores no
// body at all. Default: 1 MiB.
func WithMaxResponseBody(n int) HTTPOption {
	return mustHTTP(failIf(n < 0, "max response body %d is negative", n), func(c *httpConfig) { c.maxResponseBody = n })
}

// WithProblemTypeBase sets the prefix of the "type" URI in problem
// responses; the problem's name (such as "conflict") is appended.
// Default: DefaultProblemTypeBase.
func WithProblemTypeBase(base string) HTTPOption {
	return mustHTTP(failIf(base == "", "empty problem type base"), func(c *httpConfig) { c.problemBase = base })
}

// WithNamespace sets the function that names the client a request comes
// from (a principal, tenant or API key). Keys are scoped by it, so two
// clients never share a key. An empty namespace is global (or refused,
// with the engine's WithRequiredNamespace). Default: global for every
// request.
func WithNamespace(fn func(*http.Request) string) HTTPOption {
	return mustHTTP(failIf(fn == nil, "nil namespace function"), func(c *httpConfig) { c.namespace = fn })
}

// WithFingerprint replaces the request fingerprint. fn gets the request and
// its body (already read; r.Body must not be read). A policy refuses it
// together with WithJSONFingerprint. Default: [Fingerprint]
// of the method, r.URL.RequestURI() and the body. The host is not part of
// it: a retry may reach the service by another address (another instance,
// a client-side load balancer). A service that serves different clients
// by host scopes keys by it with WithNamespace.
func WithFingerprint(fn func(r *http.Request, body []byte) string) HTTPOption {
	return mustHTTP(failIf(fn == nil, "nil fingerprint function"), func(c *httpConfig) { c.fingerprint = fn })
}

// WithReleaseRule replaces the rule that decides, from the handler's status
// code, whether the key is released (the response is not stored, a retry
// runs again) rather than stored. Panics and hijacked connections always
// release. Default: [DefaultReleaseRule].
func WithReleaseRule(fn func(status int) bool) HTTPOption {
	return mustHTTP(failIf(fn == nil, "nil release rule"), func(c *httpConfig) { c.release = fn })
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
// Date rules still apply). Default: every header but those the middleware
// never stores (see Response).
func WithReplayedHeaders(names ...string) HTTPOption {
	allow := map[string]bool{"Content-Type": true, "Content-Encoding": true, "Location": true, "Etag": true, "Cache-Control": true}
	var err error
	for _, n := range names {
		if !validHeaderName(n) {
			err = badOption("replayed header %q is not a valid header name", n)
			break
		}
		allow[http.CanonicalHeaderKey(n)] = true
	}
	return mustHTTP(err, func(c *httpConfig) { c.replayAllow = allow })
}

// RouteFunc sets how the middleware names the route template of a
// request, overriding the ServeMux pattern, or the template an adapter
// read from its router. Adapters know their router's template: use it
// only where a route's keys must be scoped by something else.
func RouteFunc(fn func(*http.Request) string) HTTPOption {
	return mustHTTP(failIf(fn == nil, "nil route function"), func(c *httpConfig) { c.routeFunc = fn })
}
