package idemgin

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
	idem "github.com/idemkit/idem/core"
)

// writer runs the rest of the Gin chain as the engine's next handler, and
// is the gin.ResponseWriter that chain writes to. Like Gin's own writer it
// holds the status until the first byte, WriteHeaderNow or Flush, so
// headers set after c.Status still go out. It goes further and holds the
// status (and a frozen copy of the headers) past WriteHeaderNow, until the
// first byte, Flush or the chain's end: a status-only response with
// c.Errors can then still be left to the middleware outside.
type writer struct {
	c      *gin.Context
	w      http.ResponseWriter // what the engine gave the handler
	late   http.Header         // what Header returns once the status is written but not sent
	hdr    http.Header         // the abandoned response's headers
	status int
	size   int  // -1 until the status is written
	set    bool // the chain set the status
	sent   bool // the status went to w
	called bool // the engine ran the chain
	pass   bool // ... on Gin's writer: the request is not protected here
	left   bool // ... and left the response to the middleware outside
}

var _ gin.ResponseWriter = (*writer)(nil)

// ServeHTTP runs the handlers after the middleware on w and r.
func (b *writer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.called = true
	c := b.c
	c.Request = r
	if _, ok := w.(gin.ResponseWriter); ok {
		// Serve passed gw through (an optional key that is absent, a
		// skipped route, or a middleware outside that protects the
		// request already): the chain runs on Gin's writer as if this
		// middleware were not there. Under a claim, or failing open, w is
		// the engine's own writer.
		b.pass = true
		c.Next()
		return
	}
	b.w = w
	c.Writer = b
	c.Next()
	if !b.sent && len(c.Errors) > 0 && (!b.set || b.status >= http.StatusBadRequest || c.IsAborted()) {
		// No body, no success status, and errors: the page is for the
		// middleware outside to render.
		b.left = true
		if idem.Abandon(w) {
			b.hdr = w.Header() // the handler's headers, which the engine kept from gw
		}
		return
	}
	b.send()
}

// Header returns the headers of the response. Once the status is written,
// changes have no effect, as with Gin.
func (b *writer) Header() http.Header {
	if b.size >= 0 && !b.sent {
		if b.late == nil {
			b.late = b.w.Header().Clone()
		}
		return b.late
	}
	return b.w.Header()
}

// WriteHeader records the status, which is sent with the first byte.
// Informational statuses (103 Early Hints) go straight through.
func (b *writer) WriteHeader(code int) {
	switch {
	case code <= 0 || b.Written():
	case code < 200 && code != http.StatusSwitchingProtocols:
		b.w.WriteHeader(code)
	default:
		b.status, b.set = code, true
	}
}

// WriteHeaderNow writes the recorded status unless it was written. The
// engine gets it with the first byte, on Flush, or when the chain returns.
func (b *writer) WriteHeaderNow() {
	b.size = max(b.size, 0)
}

// send hands the status to the engine unless it has it.
func (b *writer) send() {
	if !b.sent {
		b.sent, b.size = true, max(b.size, 0)
		b.w.WriteHeader(b.status)
	}
}

func (b *writer) Write(p []byte) (int, error) {
	b.send()
	n, err := b.w.Write(p)
	b.size += n
	return n, err
}

// WriteString writes s through the engine's capture without a copy when
// the writer supports it.
func (b *writer) WriteString(s string) (int, error) {
	b.send()
	n, err := io.WriteString(b.w, s)
	b.size += n
	return n, err
}

func (b *writer) Status() int   { return b.status }
func (b *writer) Size() int     { return b.size }
func (b *writer) Written() bool { return b.size != -1 }

// Flush sends the status and what was written so far; under a claim the
// response then streams (see the package documentation).
func (b *writer) Flush() {
	b.send()
	_ = http.NewResponseController(b.w).Flush()
}

var errHijackAfterWrite = errors.New("idemgin: hijack after the response body was written")

// Hijack hands the connection over (the engine releases the key). As with
// Gin, it fails once body bytes were written.
func (b *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if b.size > 0 {
		return nil, nil, errHijackAfterWrite
	}
	conn, rw, err := http.NewResponseController(b.w).Hijack()
	if err == nil {
		b.sent, b.size = true, max(b.size, 0)
	}
	return conn, rw, err
}

// CloseNotify returns the close channel of the first writer down the chain
// that has one (Gin's own, as without the middleware). New code should
// watch the request's context instead.
func (b *writer) CloseNotify() <-chan bool {
	for w := b.w; w != nil; {
		//lint:ignore SA1019 gin.ResponseWriter includes http.CloseNotifier.
		if cn, ok := w.(http.CloseNotifier); ok {
			return cn.CloseNotify()
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			break
		}
		w = u.Unwrap()
	}
	return nil
}

// Pusher returns the http.Pusher of the writer below, or nil. Under a
// claim the response is buffered, so there is none.
func (b *writer) Pusher() http.Pusher {
	switch w := b.w.(type) {
	case gin.ResponseWriter:
		return w.Pusher()
	case http.Pusher:
		return w
	}
	return nil
}

// Unwrap lets http.ResponseController reach the engine's writer.
func (b *writer) Unwrap() http.ResponseWriter { return b.w }
