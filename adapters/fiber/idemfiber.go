package idemfiber

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v3"
	idem "github.com/idemkit/idem/core"
	"github.com/valyala/fasthttp"
)

// ErrBadOption is wrapped by the error Middleware panics with when it is
// given an engine it cannot serve; it wraps idem.ErrBadOption.
var ErrBadOption = fmt.Errorf("idemfiber: %w", idem.ErrBadOption)

// Config holds the Fiber equivalents of the engine options that need a
// *http.Request (idem.WithNamespace, idem.WithFingerprint), which an
// engine given to Middleware must not have. The zero Config is the
// default: every client shares one namespace, and the fingerprint is the
// engine's (the method, the request target as sent and the body;
// idem.WithJSONFingerprint applies).
type Config struct {
	// Namespace returns the client's namespace (a tenant or an
	// authenticated user), which scopes its keys; "" is the global
	// namespace (refused with 403 under idem.WithRequireNamespace). Nil
	// means "" for every request. Mount the middleware after the
	// authentication it reads.
	Namespace func(c fiber.Ctx) string
	// Fingerprint returns the fingerprint of the request, whose body is
	// body; a retry with the same key and another fingerprint gets 422.
	// Nil means the engine's fingerprint.
	Fingerprint func(c fiber.Ctx, body []byte) string
}

// Middleware returns Fiber middleware that protects the routes it is
// declared on with e's policy and opts, with the zero Config; see
// Config.Middleware.
func Middleware(e *idem.Engine, opts ...idem.RouteOption) fiber.Handler {
	return Config{}.Middleware(e, opts...)
}

// Middleware returns Fiber middleware that protects the routes it is
// declared on with e's policy and opts (nil options are ignored). Keys
// are scoped by the namespace, the method and the template of the route
// Fiber matched (c.Route().Path, "/orders/:id"). Mount it on routes, not
// with app.Use or a group's handlers: there Fiber has not routed the
// request yet, and the middleware answers every request with a protected
// method 500 (see the package documentation).
//
//	app.Post("/orders", idemfiber.Middleware(engine), createOrder)
//
// It panics with an error wrapping ErrBadOption when e is nil or has
// options that need a *http.Request (idem.Engine.RequestOptions).
func (cfg Config) Middleware(e *idem.Engine, opts ...idem.RouteOption) fiber.Handler {
	if e == nil {
		panic(fmt.Errorf("%w: the engine is nil; pass one that idem.New returned", ErrBadOption))
	}
	if names := e.RequestOptions(); len(names) > 0 {
		panic(fmt.Errorf("%w: the engine has %s, which need a *http.Request that Fiber does not have; "+
			"build it without them and set idemfiber.Config's Namespace or Fingerprint instead "+
			"(WithKeyField has no Fiber equivalent: send the key in the %s header)",
			ErrBadOption, strings.Join(names, ", "), e.KeyHeader()))
	}
	p, _ := e.Problem(idem.ErrMissingKey)
	m := &middleware{e: e, p: e.Policy(opts...), cfg: cfg, base: strings.TrimSuffix(p.Type, "missing-key")}
	for k := range e.ReplayHeader(&idem.Response{Status: http.StatusNoContent}) {
		m.marker = k // the replay marker alone: no headers, no body
	}
	return m.handle
}

// CheckRoutes returns an error wrapping idem.ErrBadOption when an
// idem.ForRoute rule in opts names a route app does not have (a typo
// would leave the real route on the default policy). Call it once the
// routes are declared, with the options given to Middleware.
func CheckRoutes(app *fiber.App, opts ...idem.RouteOption) error {
	var routes []idem.RouteRule
	for _, r := range app.GetRoutes(true) {
		routes = append(routes, idem.RouteRule{Method: r.Method, Route: r.Path})
	}
	return idem.CheckRoutes(routes, opts...)
}

type middleware struct {
	e      *idem.Engine
	p      *idem.Policy
	cfg    Config
	base   string // the engine's problem type base
	marker string // the engine's replay header
}

// protected marks, in c.Locals, a request a middleware already protects.
type protected struct{}

func (m *middleware) handle(c fiber.Ctx) error {
	e, method := m.e, c.Method()
	if !e.Protects(method) || c.Locals(protected{}) != nil {
		return c.Next() // a nested middleware: the outer policy applies
	}
	if !c.Matched() {
		return send(c, idem.Problem{Type: m.base + "route-unknown", Status: http.StatusInternalServerError,
			Title:  "Idempotency middleware cannot see the route",
			Detail: "The server mounts the idempotency middleware with app.Use or on a group, before Fiber routes the request; it must be mounted on the routes."})
	}
	route := c.Route().Path
	rt := m.p.Route(method, route)
	if rt.Skip {
		return c.Next()
	}
	var buf [1]string
	key, err := idem.ParseKey(values(buf[:0], c.Request().Header.PeekAll(e.KeyHeader())))
	if errors.Is(err, idem.ErrMissingKey) && !rt.Required {
		return c.Next()
	} else if err != nil {
		return m.fail(c, err)
	}
	body, err := m.body(c)
	if err != nil {
		return m.fail(c, err)
	}
	ns, fp := "", ""
	// Copied: Fiber's strings may share its buffers, reused after the request.
	if m.cfg.Namespace != nil {
		ns = strings.Clone(m.cfg.Namespace(c))
	}
	if m.cfg.Fingerprint != nil {
		fp = strings.Clone(m.cfg.Fingerprint(c, body))
	} else if fp, err = e.FingerprintRequest(method, c.OriginalURL(), body); err != nil {
		return m.fail(c, err)
	}
	call, stored, err := e.Start(c.Context(), idem.Op{Namespace: ns, Kind: method, Name: route, Key: key, Fingerprint: fp, Retention: rt.Retention})
	switch {
	case err != nil:
		return m.fail(c, err)
	case stored != nil:
		return m.replay(c, stored)
	}
	return m.run(c, call)
}

// run runs the rest of the chain under call and settles it with the
// response the chain leaves in c.
func (m *middleware) run(c fiber.Ctx, call *idem.Call) error {
	c.Locals(protected{}, true)
	res := c.Response()
	outer := headers(&res.Header, nil, true) // set by middleware outside
	c.SetContext(call.Context(c.Context()))
	done := false
	defer func() {
		if !done {
			call.Release() // a panic: released, and it goes on to the recoverer
		}
	}()
	if err := c.Next(); err != nil {
		// The error's page is rendered here, so that it is the response
		// stored (or released, by its status) rather than left unwritten.
		if err := c.App().ErrorHandler(c, err); err != nil {
			_ = c.SendStatus(http.StatusInternalServerError)
		}
	}
	done = true
	resp := idem.Response{Status: res.StatusCode(), Header: headers(&res.Header, outer, false)}
	if res.IsBodyStream() {
		resp.BodyOmitted = true // streamed: not buffered, so not kept
	} else {
		resp.Body = res.Body()
	}
	if err := call.Finish(resp); err != nil {
		res.Reset() // the response did not happen
		return m.fail(c, err)
	}
	return nil
}

// body reads the request body, up to the engine's cap.
func (m *middleware) body(c fiber.Ctx) ([]byte, error) {
	limit, req := m.e.MaxRequestBody(), c.Request()
	tooLarge := func() error {
		return problemError{idem.Problem{Type: m.base + "body-too-large", Status: http.StatusRequestEntityTooLarge,
			Title: "Request body too large", Detail: fmt.Sprintf("The request body is larger than %d bytes.", limit)}}
	}
	if int64(req.Header.ContentLength()) > limit {
		return nil, tooLarge()
	}
	if !req.IsBodyStream() {
		if b := req.Body(); int64(len(b)) <= limit {
			return b, nil
		}
		return nil, tooLarge()
	}
	b, err := io.ReadAll(io.LimitReader(req.BodyStream(), limit+1))
	switch {
	case err != nil:
		return nil, problemError{idem.Problem{Type: m.base + "body-unreadable", Status: http.StatusBadRequest,
			Title: "Request body could not be read", Detail: "The request body could not be read."}}
	case int64(len(b)) > limit:
		return nil, tooLarge()
	}
	req.SetBody(b) // for the handler, in place of the stream read here
	return req.Body(), nil
}

// replay sends a stored response, with the headers Engine.ReplayHeader
// gives it (fasthttp sets Content-Length from the body).
func (m *middleware) replay(c fiber.Ctx, resp *idem.Response) error {
	h := &c.Response().Header
	for k, vs := range resp.Header {
		h.Del(k)
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	h.Set(m.marker, "true")
	if resp.BodyOmitted {
		h.Set(idem.HeaderBodyOmitted, "true")
	}
	c.Status(resp.Status)
	c.Response().SetBody(resp.Body)
	return nil
}

// problemError is a problem the adapter answers with itself.
type problemError struct{ p idem.Problem }

func (e problemError) Error() string { return "idemfiber: " + e.p.Title }

// fail answers err's problem; an error that is not the engine's goes on to
// Fiber's error handler.
func (m *middleware) fail(c fiber.Ctx, err error) error {
	if pe, ok := err.(problemError); ok {
		return send(c, pe.p)
	}
	p, ok := m.e.Problem(err)
	if !ok {
		return err
	}
	return send(c, p)
}

func send(c fiber.Ctx, p idem.Problem) error {
	if c.Request().IsBodyStream() {
		c.RequestCtx().SetConnectionClose() // the rest of the body is not read
	}
	c.Set("Content-Type", "application/problem+json")
	c.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		c.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	return c.Status(p.Status).Send(p.JSON())
}

// headers returns the response headers in h but those outer holds with
// the same values. With before, it returns nil when h holds no header but
// Content-Type and Content-Length (fasthttp's own, always the handler's).
func headers(h *fasthttp.ResponseHeader, outer http.Header, before bool) http.Header {
	var out http.Header
	for k, v := range h.All() {
		name := http.CanonicalHeaderKey(string(k))
		if before && (name == "Content-Type" || name == "Content-Length") {
			continue
		}
		if out == nil {
			out = make(http.Header, 8)
		}
		out[name] = append(out[name], string(v))
	}
	for k, v := range outer {
		if slices.Equal(out[k], v) {
			delete(out, k)
		}
	}
	return out
}

// values appends a header's values to dst as strings.
func values(dst []string, b [][]byte) []string {
	for _, v := range b {
		dst = append(dst, string(v))
	}
	return dst
}
