package idem

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"
)

// This file is the HTTP layer over the lifecycle (lifecycle.go): the key
// in a header, the bounded body, the captured response (capture.go) and
// the problem answers. The lifecycle decides; this file speaks HTTP.

// Serve runs next for r under idempotency protection. route is the route
// template the request matched (such as "/orders/{id}"); it scopes the key
// together with the method and the client's namespace. Adapters call Serve
// once they know the template.
//
// These requests go to next untouched, with w and r as given: a method the
// policy does not protect (WithMethods); a route marked Skip; no key where the key is
// optional; and a request whose w is, or wraps, the writer of a request
// the engine already protects (middleware mounted twice: the outer policy
// applies). Otherwise the request body is read (up to the cap) and replaced
// by an identical one, and next runs only if this request takes the
// claim, with a writer that buffers the response until it is stored or
// released. With RouteFunc, its answer replaces route.
func (p *Policy) Serve(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	if p.h.routeFunc != nil {
		route = p.h.routeFunc(r)
	}
	p.serve(w, r, route, next)
}

// serve is Serve with route as given.
func (p *Policy) serve(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	if p.compiled != nil {
		if q, ok := p.compiled[routeKey{r.Method, route}]; ok {
			p = q
		}
	}
	e := p.e
	if !p.Protects(r.Method) || nested(w) {
		// A nested middleware (mounted globally and again on the route)
		// must not claim the key the outer one holds: the outer policy
		// applies.
		next.ServeHTTP(w, r)
		return
	}
	x := &exchange{p: p, w: w, r: r, next: next}
	f := &x.f
	f.e, f.ctx, f.start = e, r.Context(), time.Now()
	f.ev.Method, f.ev.Route = r.Method, route
	defer f.end()
	if p.skip {
		x.skip()
		return
	}
	if x.admit(route) {
		x.answer(f.acquire())
	}
}

// admit reads what scopes and identifies the request: the key (from the
// header, or the body with WithKeyField), the body, the namespace and the
// fingerprint. It returns false when it answered the request instead
// (a problem, or the handler run unprotected for an optional key).
func (x *exchange) admit(route string) bool {
	p, f, r := x.p, &x.f, x.r
	e, h := p.e, p.h
	key, err := ParseKey(r.Header[h.keyHeader])
	fromBody := h.bodyKey(err) // WithKeyField: the key is in the body
	switch {
	case fromBody:
	case errors.Is(err, ErrMissingKey) && !p.required:
		x.skip()
		return false
	case errors.Is(err, ErrMissingKey):
		x.fail(OutcomeMissingKey, problemMissingKey, "Send an "+h.keyHeader+" header with a unique key, such as a UUID.")
		return false
	case err != nil:
		x.fail(OutcomeInvalidKey, problemInvalidKey, sentence(strings.TrimPrefix(err.Error(), ErrInvalidKey.Error()+": ")))
		return false
	}
	f.key, f.ev.key = key, key
	body, ok := x.takeBody()
	if !ok {
		return false
	}
	var doc *jsonDoc // the body parsed as JSON, when it was
	if fromBody {
		var ok bool
		if key, doc, ok = x.keyFromBody(body); !ok {
			return false // answered
		}
		f.key, f.ev.key = key, key
	}
	if e.cfg.keyValidator != nil {
		if err := e.cfg.keyValidator(f.key); err != nil {
			x.fail(OutcomeInvalidKey, problemInvalidKey, sentence("The key is refused: "+err.Error()))
			return false
		}
	}
	return x.identify(route, body, doc)
}

// identify scopes the flight by namespace, method and route, and
// fingerprints the request; doc is the body already parsed as JSON, or
// nil. It returns false when it answered instead (403 without a required
// namespace, 400 for a body that is not JSON with WithJSONFingerprint).
func (x *exchange) identify(route string, body []byte, doc *jsonDoc) bool {
	p, f, r := x.p, &x.f, x.r
	e, h := p.e, p.h
	ns := ""
	if h.namespace != nil {
		ns = h.namespace(r)
	}
	if ns == "" && e.cfg.requireNamespace {
		x.fail(OutcomeNoNamespace, problemNoNamespace, detailNoNamespace)
		return false
	}
	f.scope = Scope(ns, r.Method, route)
	if e.cfg.globalKeys {
		f.scope = Scope(ns, "", "") // another route or method: another fingerprint, 422
	}
	switch {
	case h.fingerprint != nil:
		f.fp = h.fingerprint(r, body)
	case h.jsonFP != nil:
		var ok bool
		if f.fp, ok = x.jsonFingerprint(body, doc); !ok {
			return false // answered 400
		}
	default:
		f.fp = fingerprintRequest(r, body)
	}
	f.rawFP, f.fp = f.fp, e.keyFingerprint(f.fp)
	f.token = newToken()
	f.retention = p.retention
	f.lease = min(e.cfg.lease, p.retention)

	return true
}

// answer runs the handler under the claim, or answers from what acquire
// found instead.
func (x *exchange) answer(o outcome) {
	f, r := &x.f, x.r
	switch o.verdict {
	case acquired:
		x.execute()
	case replay:
		resp, err := forRequest(f.replayed(o.rec), r.Header["Accept-Encoding"])
		if err != nil {
			f.ev.Err = err
			x.fail(OutcomeNotAcceptable, problemNotAcceptable, "The stored response is content-encoded ("+
				strings.Join(o.rec.Response.Header["Content-Encoding"], ", ")+") and this request does not accept that encoding. Retry with an Accept-Encoding that accepts it.")
			return
		}
		f.ev.Status = resp.Status
		replayHTTP(x.w, resp, x.p.h.replayHeader)
	case mismatch:
		x.problem(problemMismatch, detailMismatch, 0)
	case inFlight:
		x.problem(problemConflict, detailConflict, seconds(f.retryAfter(o.rec)))
	case failed:
		x.storeFailure(o.err)
	case canceled:
		// The client is gone; the answer is for the log of any proxy.
		x.problem(problemCanceled, detailCanceled, 0)
	case unreadable:
		x.problem(problemUnreadable, detailUnreadable, 0)
	}
}

// exchange is one protected HTTP request: its flight through the
// lifecycle, and what the HTTP layer needs around it.
type exchange struct {
	f    flight
	p    *Policy
	w    http.ResponseWriter
	r    *http.Request
	next http.Handler
	body bodyReader // the request body handed to the handler
	cw   capture    // the response writer handed to the handler
	cl   [1]string  // Content-Length of the buffered response
}

func (x *exchange) skip() {
	x.next.ServeHTTP(x.w, x.r)
	x.f.ev.Outcome = OutcomeSkipped
}

func (x *exchange) fail(o Outcome, k problemKind, detail string) {
	x.f.ev.Outcome = o
	x.problem(k, detail, 0)
}

// problem answers with a problem of kind k; retryAfter, when positive, is
// its Retry-After in seconds.
func (x *exchange) problem(k problemKind, detail string, retryAfter int) {
	writeProblem(x.w, x.p.h.problemBase, k, detail, retryAfter)
	x.f.ev.Status = k.status
}

// storeFailure answers a failed store: 503, or with fail open the handler
// runs unprotected.
func (x *exchange) storeFailure(err error) {
	e := x.p.e
	if e.failsOpen(err) {
		x.f.ev.FailedOpen = true
		sw := statusWriter{ResponseWriter: x.w}
		x.next.ServeHTTP(&sw, x.r)
		x.f.ev.Status = sw.status
		return
	}
	x.problem(problemStore, detailStore, seconds(e.retryAfter(0)))
}

// execute runs the handler under the claim this request holds.
func (x *exchange) execute() {
	e, f := x.p.e, &x.f
	if err := f.begin(); err != nil {
		switch f.ev.Outcome {
		case OutcomeCanceled:
			x.problem(problemCanceled, detailCanceled, 0)
		case OutcomeConflict:
			x.problem(problemConflict, detailConflict, seconds(e.retryAfter(0)))
		default:
			x.storeFailure(err)
		}
		return
	}
	f.to(running, nil)
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	x.cw = capture{w: x.w, max: x.p.h.maxResponseBody, buf: buf, x: x}
	x.run()
	if buf.Cap() <= 64<<10 {
		bufPool.Put(buf)
	}
}

// run calls the handler with the capture, and settles what it leaves.
func (x *exchange) run() {
	f, c, r := &x.f, &x.cw, x.r
	if f.tx != nil {
		r = r.WithContext(f.tx.Context(r.Context()))
	}
	hstart := time.Now()
	finished := false
	defer func() {
		if !finished {
			// The handler panicked: release the key and let the panic go on.
			f.ev.Handler = time.Since(hstart)
			f.to(aborted, nil)
		}
	}()
	x.next.ServeHTTP(c, r)
	finished = true
	f.ev.Handler = time.Since(hstart)
	switch f.st {
	case abandoning:
		f.to(aborted, nil)
	case streaming:
		c.sendTrailers() // stored or released when it started
	case running:
		if c.status == 0 {
			c.WriteHeader(http.StatusOK)
		}
		c.sniff()
		if x.settle(settled) {
			c.send()
		}
	}
	// hijacked: released when the connection was taken; discarding:
	// answered when the commit failed.
}

// settle moves the flight to next (settled, or streaming for a response
// that starts before the handler returned): the captured response is
// stored, or the key released by the release rule. It returns false
// when a failed transaction commit was answered with 503 instead of the
// response.
func (x *exchange) settle(next state) bool {
	h, f, c := x.p.h, &x.f, &x.cw
	f.ev.Status = c.status
	// Statuses outside MinStatus..MaxStatus (a 101 without a hijack, a
	// 7xx) cannot be replayed: never stored.
	var resp *Response
	if c.status >= MinStatus && c.status <= MaxStatus && !h.release(c.status) {
		omitted := next == streaming
		resp = &Response{Status: c.status, Header: storedHeader(c.header, x.w.Header(), h.replayHeader, omitted, h.replayAllow)}
		if omitted {
			resp.BodyOmitted = true
		} else {
			resp.Body = c.buf.Bytes()
		}
	}
	if !f.to(next, resp) {
		x.problem(problemCommit, detailCommit, seconds(x.p.e.retryAfter(0)))
		return false
	}
	return true
}

// onHijack releases the claim before the connection is handed over.
func (x *exchange) onHijack() { x.f.to(hijacked, nil) }

// nested reports whether w is, or wraps, the writer of a request this
// engine (or another) already protects.
func nested(w http.ResponseWriter) bool { return findCapture(w) != nil }

// statusWriter records the status of an unprotected response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush and Hijack keep what the underlying writer can do, for handlers
// that assert http.Flusher or http.Hijacker while running unprotected.
func (s *statusWriter) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(s.ResponseWriter).Hijack()
}

// sentence makes an error's reason a sentence: a capital first letter and
// a final period.
func sentence(s string) string {
	if s == "" {
		return s
	}
	if c := s[0]; 'a' <= c && c <= 'z' {
		s = string(c-'a'+'A') + s[1:]
	}
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}
