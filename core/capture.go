package idem

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// capture is the ResponseWriter the handler writes to while the engine
// holds a claim. It buffers the response up to the engine's cap so the
// record is completed before the first byte is sent. When the response
// outgrows the cap, or the handler flushes, capture commits: the engine
// stores status and headers with the body omitted (or releases the key),
// and the rest streams through.
type capture struct {
	w      http.ResponseWriter
	max    int
	status int         // final status, 0 until written
	header http.Header // the handler's headers, frozen once the status is written
	late   http.Header // what Header returns after the status was written
	buf    *bytes.Buffer
	x      *exchange // its flight's state says where the response is going
}

// The response's course, from the flight's state (lifecycle.go).
func (c *capture) direct() bool   { return c.x.f.st == streaming || c.x.f.st == discarding } // writes go to w
func (c *capture) discard() bool  { return c.x.f.st == discarding }                          // a failed commit was answered: writes fail
func (c *capture) hijacked() bool { return c.x.f.st == hijacked }
func (c *capture) abandon() bool  { return c.x.f.st == abandoning } // Abandon: release, send nothing

// errAbandoned is what writes return after a failed exactly-once commit was
// answered with 500 in the middle of a streamed response.
var errAbandoned = errors.New("idem: response abandoned: the transaction failed to commit")

// errAbandonedByHandler is what writes return after Abandon.
var errAbandonedByHandler = errors.New("idem: response abandoned: it is written outside the engine")

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Header returns the handler's own header map, started from a copy of the
// underlying writer's, so a handler that panics leaves the real headers as
// they were. Changes after WriteHeader have no effect, as with net/http.
func (c *capture) Header() http.Header {
	if c.status != 0 {
		if c.late == nil {
			c.late = c.header.Clone()
		}
		return c.late
	}
	if c.header == nil {
		c.header = c.w.Header().Clone()
		if c.header == nil {
			c.header = make(http.Header)
		}
	}
	return c.header
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (c *capture) Unwrap() http.ResponseWriter { return c.w }

func (c *capture) WriteHeader(status int) {
	if status < 100 || status > 999 {
		// As net/http does; the engine releases the key on the panic.
		panic(fmt.Sprintf("invalid WriteHeader code %v", status))
	}
	if c.status != 0 || c.hijacked() || c.abandon() {
		return
	}
	if status >= 100 && status < 200 && status != http.StatusSwitchingProtocols {
		// Informational responses (103 Early Hints) go straight through,
		// with the headers set so far; the writer's own headers are put
		// back after, so they still tell outer headers from the handler's.
		h := c.w.Header()
		saved := h.Clone()
		for k, v := range c.header {
			h[k] = v[:len(v):len(v)]
		}
		c.w.WriteHeader(status)
		clear(h)
		for k, v := range saved {
			h[k] = v
		}
		return
	}
	c.status = status
	if c.header == nil {
		c.header = c.w.Header().Clone()
		if c.header == nil {
			c.header = make(http.Header)
		}
	}
}

func (c *capture) Write(p []byte) (int, error) {
	if c.hijacked() {
		return 0, http.ErrHijacked
	}
	if c.abandon() {
		return 0, errAbandonedByHandler
	}
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(c.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if !c.direct() && c.buf.Len()+len(p) > c.max {
		c.startStreaming()
	}
	if c.discard() {
		return 0, errAbandoned
	}
	if c.direct() {
		return c.w.Write(p)
	}
	return c.buf.Write(p)
}

func (c *capture) WriteString(s string) (int, error) {
	if c.status != 0 && !c.direct() && !c.hijacked() && !c.abandon() && bodyAllowed(c.status) && c.buf.Len()+len(s) <= c.max {
		return c.buf.WriteString(s)
	}
	return c.Write([]byte(s))
}

// ReadFrom copies through the capture, so the body is buffered like any
// other write.
func (c *capture) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{c}, r)
}

// Flush starts streaming: a handler that flushes wants the client to see
// bytes now, so the record is completed without the body first.
func (c *capture) Flush() {
	if c.hijacked() || c.abandon() {
		return
	}
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !c.direct() {
		c.startStreaming()
	}
	if !c.discard() {
		_ = http.NewResponseController(c.w).Flush()
	}
}

// FlushError is Flush for http.ResponseController.
func (c *capture) FlushError() error {
	if c.hijacked() {
		return http.ErrHijacked
	}
	if c.abandon() {
		return errAbandonedByHandler
	}
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !c.direct() {
		c.startStreaming()
	}
	if c.discard() {
		return errAbandoned
	}
	return http.NewResponseController(c.w).Flush()
}

// Hijack releases the key (the response cannot be stored) and hands the
// connection over.
func (c *capture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if c.direct() && c.status != 0 {
		return nil, nil, errors.New("idem: hijack after the response started")
	}
	conn, rw, err := http.NewResponseController(c.w).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if !c.hijacked() {
		c.x.onHijack()
	}
	return conn, rw, nil
}

// Abandon tells the engine protecting the request that w serves that the
// response is not the handler's to give: middleware outside the engine
// will write it (a Gin error renderer that turns c.Errors into a page,
// say). The key is released, nothing is sent, and the writer outside is
// left as it was, headers included. It returns false, doing nothing, when
// w does not belong to a protected request or the response has started.
func Abandon(w http.ResponseWriter) bool {
	c := findCapture(w)
	if c == nil || c.status != 0 || c.direct() || c.hijacked() {
		return false
	}
	c.x.f.to(abandoning, nil)
	return true
}

// findCapture returns the engine's writer that w is or wraps (through
// Unwrap, as framework writers do), or nil.
func findCapture(w http.ResponseWriter) *capture {
	for range 16 {
		switch u := w.(type) {
		case *capture:
			return u
		case interface{ Unwrap() http.ResponseWriter }:
			w = u.Unwrap()
		default:
			return nil
		}
	}
	return nil
}

// sniff sets Content-Type from the buffered bytes when the handler set
// none, as net/http does when it writes the headers, so the stored record
// and its replays carry the type the first client saw.
func (c *capture) sniff() {
	if c.buf.Len() == 0 || !bodyAllowed(c.status) {
		return
	}
	if _, ok := c.header["Content-Type"]; ok || len(c.header["Transfer-Encoding"]) > 0 {
		return
	}
	b := c.buf.Bytes()
	c.header["Content-Type"] = []string{http.DetectContentType(b[:min(len(b), 512)])}
}

// startStreaming commits the response: the engine decides store or
// release, then the headers and buffered bytes go out.
func (c *capture) startStreaming() {
	c.sniff()
	if !c.x.settle(streaming) {
		return // discarding
	}
	c.sendHead(-1)
	if c.buf.Len() > 0 {
		_, _ = c.w.Write(c.buf.Bytes())
		c.buf.Reset()
	}
}

// sendHead writes the snapshot of headers taken at WriteHeader and the
// status to the underlying writer. A length that is not negative is sent
// as Content-Length unless the handler set one or the status has no body.
// The snapshot itself is never changed: the store may hold it.
func (c *capture) sendHead(length int) {
	h := c.w.Header()
	clear(h)
	for k, v := range c.header {
		h[k] = v[:len(v):len(v)] // an append outside must not reach the stored slice
	}
	if length >= 0 && bodyAllowed(c.status) && len(h["Content-Length"]) == 0 && len(h["Transfer-Encoding"]) == 0 && len(h["Trailer"]) == 0 {
		c.x.cl[0] = strconv.Itoa(length)
		h["Content-Length"] = c.x.cl[:]
	}
	c.w.WriteHeader(c.status)
}

// send writes the buffered response once the handler has returned and the
// record is stored or released, then any trailers the handler set.
func (c *capture) send() {
	c.sendHead(c.buf.Len())
	if c.buf.Len() > 0 {
		_, _ = c.w.Write(c.buf.Bytes())
	}
	c.sendTrailers()
}

// sendTrailers hands the trailers the handler set after the status (in
// its late header map) to the writer, which sends them after the body.
func (c *capture) sendTrailers() {
	if len(c.late) == 0 {
		return
	}
	declared := c.header["Trailer"]
	h := c.w.Header()
	for k, v := range c.late {
		if strings.HasPrefix(k, http.TrailerPrefix) || slices.ContainsFunc(declared, func(d string) bool {
			return slices.ContainsFunc(strings.Split(d, ","), func(f string) bool { return http.CanonicalHeaderKey(strings.TrimSpace(f)) == k })
		}) {
			h[k] = v
		}
	}
}
