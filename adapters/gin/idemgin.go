package idemgin

import (
	"bufio"
	"errors"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
	idem "github.com/idemkit/idem/core"
)

// Middleware returns Gin middleware that protects the routes it covers with
// e's policy and opts. Build it once, where the router, group or route is
// declared:
//
//	router.Use(idemgin.Middleware(engine))                                // every route
//	api := router.Group("/api", idemgin.Middleware(engine, idem.TTL(time.Hour)))
//	router.POST("/search", idemgin.Middleware(engine, idem.Optional()), search)
//
// Keys are scoped by the route template Gin matched (c.FullPath(), such as
// "/orders/:id"), which Gin resolves before any handler of the chain runs,
// so the result is the same wherever the middleware is mounted. Requests
// Gin did not match (404, 405: FullPath is empty) and methods the engine
// does not protect go on down the chain untouched.
//
// The handlers after the middleware write through a gin.ResponseWriter that
// feeds the engine's capture, with Gin's own semantics: the status is sent
// lazily, so c.Status(201) with no body, c.AbortWithStatus and WriteString
// are all captured, stored and replayed. Middleware that turns c.Errors
// into an error page must be mounted after this one for the page to be
// stored. When the engine answers without running the chain (a replay, a
// 409, 422, 400, 413 or 503), the chain is aborted and the response is
// written by the time the middleware returns. A panic releases the key and
// goes on to Gin's recovery middleware, which should be mounted first.
func Middleware(e *idem.Engine, opts ...idem.RouteOption) gin.HandlerFunc {
	p := e.Policy(opts...)
	return func(c *gin.Context) {
		route := c.FullPath()
		if route == "" || !e.Protects(c.Request.Method) {
			c.Next()
			return
		}
		gw, r := c.Writer, c.Request
		defer func() { c.Writer, c.Request = gw, r }()
		b := &writer{c: c, status: http.StatusOK, size: -1}
		p.Serve(gw, r, route, b)
		if !b.called {
			c.Abort()
		}
		gw.WriteHeaderNow()
	}
}

// writer runs the rest of the Gin chain as the engine's next handler, and
// is the gin.ResponseWriter that chain writes to. Like Gin's own writer it
// holds the status until the first byte, WriteHeaderNow or Flush, so
// headers set after c.Status still go out.
type writer struct {
	c      *gin.Context
	w      http.ResponseWriter // what the engine gave the handler
	status int
	size   int // -1 until the status is sent
	called bool
}

var _ gin.ResponseWriter = (*writer)(nil)

// ServeHTTP runs the handlers after the middleware on w and r.
func (b *writer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.called, b.w = true, w
	b.c.Writer, b.c.Request = b, r
	b.c.Next()
	b.WriteHeaderNow()
}

func (b *writer) Header() http.Header { return b.w.Header() }

// WriteHeader records the status, which is sent with the first byte.
// Informational statuses (103 Early Hints) go straight through.
func (b *writer) WriteHeader(code int) {
	switch {
	case code <= 0 || b.Written():
	case code < 200 && code != http.StatusSwitchingProtocols:
		b.w.WriteHeader(code)
	default:
		b.status = code
	}
}

// WriteHeaderNow sends the recorded status unless it was sent.
func (b *writer) WriteHeaderNow() {
	if !b.Written() {
		b.size = 0
		b.w.WriteHeader(b.status)
	}
}

func (b *writer) Write(p []byte) (int, error) {
	b.WriteHeaderNow()
	n, err := b.w.Write(p)
	b.size += n
	return n, err
}

// WriteString writes s through the engine's capture without a copy when
// the writer supports it.
func (b *writer) WriteString(s string) (int, error) {
	b.WriteHeaderNow()
	var n int
	var err error
	if sw, ok := b.w.(interface{ WriteString(string) (int, error) }); ok {
		n, err = sw.WriteString(s)
	} else {
		n, err = b.w.Write([]byte(s))
	}
	b.size += n
	return n, err
}

func (b *writer) Status() int   { return b.status }
func (b *writer) Size() int     { return b.size }
func (b *writer) Written() bool { return b.size != -1 }

// Flush sends the status and what was written so far; under a claim the
// engine then stores the status and headers without the body and streams
// the rest.
func (b *writer) Flush() {
	b.WriteHeaderNow()
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
	if err == nil && b.size < 0 {
		b.size = 0
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
