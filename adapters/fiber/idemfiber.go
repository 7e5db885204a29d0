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

// ErrBadOption, which wraps idem.ErrBadOption, is wrapped by the panic of
// Middleware given a nil engine or options it cannot apply.
var ErrBadOption = fmt.Errorf("idemfiber: %w", idem.ErrBadOption)

// Config holds the Fiber equivalents of idem.WithNamespace and
// idem.WithFingerprint, which need a *http.Request. The zero Config is
// one namespace for all, and the policy's fingerprint.
type Config struct {
	// Namespace returns the client's namespace (a tenant, a user), which
	// scopes its keys; "" is the global one (403 under
	// idem.WithRequiredNamespace). Nil means "" for every request.
	Namespace func(c fiber.Ctx) string
	// Fingerprint returns the request's fingerprint; a retry with the
	// same key and another fingerprint gets 422. Nil: the policy's.
	Fingerprint func(c fiber.Ctx, body []byte) string
}

// Middleware is Config.Middleware with the zero Config.
func Middleware(e *idem.Engine, opts ...idem.HTTPOption) fiber.Handler {
	return Config{}.Middleware(e, opts...)
}

// Middleware returns Fiber middleware that protects the routes it is
// declared on with e's policy and opts (nil options are ignored), keys
// scoped by the namespace, the method and c.Route().Path. Mount it on
// routes, not with app.Use or a group's handlers, where it answers 500
// (see the package documentation):
//
//	app.Post("/orders", idemfiber.Middleware(engine), createOrder)
//
// It panics with an error wrapping ErrBadOption when e is nil or opts
// hold options that need a *http.Request (idem.Policy.RequestOptions).
func (cfg Config) Middleware(e *idem.Engine, opts ...idem.HTTPOption) fiber.Handler {
	if e == nil {
		panic(fmt.Errorf("%w: the engine is nil; pass one that idem.New returned", ErrBadOption))
	}
	p := e.Policy(opts...)
	if names := p.RequestOptions(); len(names) > 0 {
		panic(fmt.Errorf("%w: Fiber has no *http.Request for %s; leave them out and set idemfiber.Config's Namespace or Fingerprint instead "+
			"(WithKeyField has no Fiber equivalent: send the key in the %s header; nor has RouteFunc: the route is c.Route().Path)", ErrBadOption, strings.Join(names, ", "), p.KeyHeader()))
	}
	m := &middleware{e: e, p: p, cfg: cfg}
	for k := range p.ReplayHeader(&idem.Response{Status: http.StatusNoContent}) {
		m.marker = k // the replay marker alone: no headers, no body
	}
	return m.handle
}

// CheckRoutes returns an error wrapping idem.ErrBadOption when an
// idem.ForRoute rule in opts names a route app does not have (a typo).
func CheckRoutes(app *fiber.App, opts ...idem.HTTPOption) error {
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
	marker string // the policy's replay header
}

// protected marks, in c.Locals, a request a middleware already protects.
type protected struct{}

func (m *middleware) handle(c fiber.Ctx) error {
	e, method := m.e, c.Method()
	if !m.p.Protects(method) || c.Locals(protected{}) != nil {
		return c.Next() // a nested middleware: the outer policy applies
	}
	if !c.Matched() { // app.Use: Fiber has not routed the request yet
		return send(c, *m.problem("route-unknown", http.StatusInternalServerError, "Idempotency middleware cannot see the route",
			"The server mounts the idempotency middleware with app.Use or on a group, before Fiber routes the request; it must be mounted on the routes."))
	}
	route := c.Route().Path
	rt := m.p.Route(method, route)
	if rt.Skip {
		return c.Next()
	}
	var buf [1]string // no allocation for the usual single value
	key, err := idem.ParseKey(values(buf[:0], c, m.p.KeyHeader()))
	if errors.Is(err, idem.ErrMissingKey) && !rt.Required {
		return c.Next()
	} else if err != nil {
		return m.fail(c, err)
	}
	body, p := m.body(c)
	if p != nil {
		return send(c, *p)
	}
	var ns, fp string
	if m.cfg.Namespace != nil {
		ns = strings.Clone(m.cfg.Namespace(c)) // Fiber's strings may share its buffers
	}
	if m.cfg.Fingerprint != nil {
		fp = strings.Clone(m.cfg.Fingerprint(c, body))
	} else if fp, err = m.p.FingerprintRequest(method, c.OriginalURL(), body); err != nil {
		return m.fail(c, err)
	}
	call, stored, err := m.p.Start(c.Context(), idem.Op{Namespace: ns, Kind: method, Name: route, Key: key, Fingerprint: fp, Retention: rt.Retention})
	if err != nil {
		return m.fail(c, err)
	} else if stored != nil {
		if stored, err = e.ReplayFor(stored, values(nil, c, "Accept-Encoding")); err != nil {
			return m.fail(c, err) // a coding the retry does not accept and idem cannot decode: 406
		}
		return m.replay(c, stored)
	}
	return m.run(c, call)
}

// run runs the rest of the chain under call and settles it.
func (m *middleware) run(c fiber.Ctx, call *idem.Call) error {
	c.Locals(protected{}, true)
	res := c.Response()
	outer := headers(&res.Header, nil, true) // set by middleware outside
	c.SetContext(call.Context(c.Context()))
	defer call.Release() // on a panic, which goes on to the recoverer; else a no-op
	if err := c.Next(); err != nil {
		// Rendered here, to be stored (or released, by its status).
		if err := c.App().ErrorHandler(c, err); err != nil {
			_ = c.SendStatus(http.StatusInternalServerError)
		}
	}
	// A streamed body is not buffered, so not kept.
	resp := idem.Response{Status: res.StatusCode(), Header: headers(&res.Header, outer, false), BodyOmitted: res.IsBodyStream()}
	if !resp.BodyOmitted {
		resp.Body = res.Body()
	}
	if err := call.Finish(resp); err != nil {
		res.Reset() // the response did not happen
		return m.fail(c, err)
	}
	return nil
}

// body reads the request body, up to the policy's cap, or returns a problem.
func (m *middleware) body(c fiber.Ctx) ([]byte, *idem.Problem) {
	limit, req := m.p.MaxRequestBody(), c.Request()
	tooLarge := int64(req.Header.ContentLength()) > limit
	var b []byte
	if !tooLarge && req.IsBodyStream() { // Fiber's StreamRequestBody
		var err error
		if b, err = io.ReadAll(io.LimitReader(req.BodyStream(), limit+1)); err != nil {
			return nil, m.problem("body-unreadable", http.StatusBadRequest, "Request body could not be read", "The request body could not be read.")
		} else if int64(len(b)) <= limit {
			req.SetBody(b) // for the handler, in place of the stream read here
		}
	} else if !tooLarge {
		b = req.Body()
	}
	if tooLarge || int64(len(b)) > limit {
		return nil, m.problem("body-too-large", http.StatusRequestEntityTooLarge, "Request body too large", fmt.Sprintf("The request body is larger than %d bytes.", limit))
	}
	return b, nil
}

// problem returns a problem the adapter answers itself, as the policy's.
func (m *middleware) problem(name string, status int, title, detail string) *idem.Problem {
	return &idem.Problem{Type: m.p.ProblemType(name), Status: status, Title: title, Detail: detail}
}

// replay sends a stored response (fasthttp sets Content-Length).
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

// values appends the request header's values for name to vals.
func values(vals []string, c fiber.Ctx, name string) []string {
	for _, v := range c.Request().Header.PeekAll(name) {
		vals = append(vals, string(v))
	}
	return vals
}

// fail answers err's problem; another error goes to Fiber's error handler.
func (m *middleware) fail(c fiber.Ctx, err error) error {
	p, ok := m.p.Problem(err)
	if !ok {
		return err
	}
	return send(c, p)
}

func send(c fiber.Ctx, p idem.Problem) error {
	if req := c.Request(); req.IsBodyStream() && !drained(req.BodyStream()) {
		c.RequestCtx().SetConnectionClose() // the rest of the body is not read
	}
	c.Set("Content-Type", "application/problem+json")
	c.Set("Cache-Control", "no-store")
	if p.RetryAfter > 0 {
		c.Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	return c.Status(p.Status).Send(p.JSON())
}

// drained reads what is left of a streamed request body, up to 256 KiB
// as net/http does: a connection closed with the client's body unread is
// reset, and the client, still sending it, then loses the answer.
func drained(r io.Reader) bool {
	n, err := io.Copy(io.Discard, io.LimitReader(r, 256<<10+1))
	return err == nil && n <= 256<<10
}

// headers returns the headers in h but those outer holds with the same
// values; before leaves out Content-Type and Content-Length, always the
// handler's (nil when h holds nothing else).
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
