package idem

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// The request body of a protected request: read once, up to the cap, and
// handed to the handler unchanged.

// takeBody reads the request body (up to the engine's cap) and hands the
// handler an identical one. It returns false when it answered instead
// (413, or 400 for a body the client did not finish sending).
func (x *exchange) takeBody() ([]byte, bool) {
	h, r := x.p.h, x.r
	body, err := x.readBody(h.maxRequestBody)
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.Is(err, errBodyTooLarge):
			x.fail(OutcomeBodyTooLarge, problemBodyTooLarge, fmt.Sprintf("The request body is larger than %d bytes.", h.maxRequestBody))
		case errors.As(err, &mbe):
			x.fail(OutcomeBodyTooLarge, problemBodyTooLarge, fmt.Sprintf("The request body is larger than %d bytes.", mbe.Limit))
		default:
			x.fail(OutcomeBodyUnreadable, problemBodyUnreadable, "The request body could not be read.")
		}
		return nil, false
	}
	x.body.Reset(body)
	r.Body = &x.body
	r.ContentLength = int64(len(body))
	return body, true
}

var errBodyTooLarge = errors.New("idem: request body too large")

// readBody reads the whole request body, up to limit bytes.
func (x *exchange) readBody(limit int64) ([]byte, error) {
	r := x.r
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	// Read to the end, whatever Content-Length says: an outer middleware
	// may have replaced the body (a decompressor), and net/http's own body
	// ends at Content-Length anyway. It sizes the first buffer, up to
	// bodyPresize, so that a client cannot make the engine allocate what it
	// declares before it sends it; the extra byte sees the end without
	// growing the buffer.
	size := int64(512)
	if r.ContentLength >= 0 {
		size = min(r.ContentLength, bodyPresize) + 1
	}
	b := make([]byte, 0, size)
	lr := io.LimitReader(r.Body, limit+1)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(b)) > limit {
		return nil, errBodyTooLarge
	}
	return b, nil
}

// bodyPresize bounds the buffer a request body is first read into.
const bodyPresize = 64 << 10

// bodyReader is the request body handed to the handler: the bytes the
// engine read, unchanged.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }
