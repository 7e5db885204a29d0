package idemclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
)

// body hands each attempt of a logical request its own copy of the
// request body.
type body struct {
	first  io.ReadCloser                 // the body of the first attempt
	get    func() (io.ReadCloser, error) // a fresh copy for a retry; nil when the body cannot be replayed
	length int64                         // the ContentLength of every attempt
}

// newBody prepares req's body for replay: with req.GetBody when it has
// one, else by reading up to limit bytes of it. A body that is longer is
// sent once, as it is. When reading fails or req's context ends first,
// req.Body is closed and the error returned.
func newBody(req *http.Request, limit int64) (body, error) {
	b := body{first: req.Body, length: req.ContentLength}
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		rc := req.Body
		b.get = func() (io.ReadCloser, error) { return rc, nil }
		return b, nil
	case req.GetBody != nil:
		b.get = req.GetBody
		return b, nil
	case limit == 0 || req.ContentLength > limit:
		return b, nil
	}
	n := limit
	if n < math.MaxInt64 {
		n++ // one byte more tells a body longer than limit
	}
	buf, err := readAll(req.Context(), io.LimitReader(req.Body, n))
	if err != nil {
		req.Body.Close() // unblocks a Read stalled past the context's end, if Close can
		if ctxErr := req.Context().Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return body{}, err
		}
		return body{}, fmt.Errorf("reading the request body: %w", err)
	}
	if int64(len(buf)) > limit {
		// Too long to replay: send what was read, then the rest.
		b.first = &peekedBody{Reader: io.MultiReader(bytes.NewReader(buf), req.Body), Closer: req.Body}
		return b, nil
	}
	req.Body.Close()
	if len(buf) == 0 {
		b.first, b.length = http.NoBody, 0
		b.get = func() (io.ReadCloser, error) { return http.NoBody, nil }
		return b, nil
	}
	if b.length <= 0 {
		b.length = int64(len(buf))
	}
	b.get = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	b.first, _ = b.get()
	return b, nil
}

// readAll reads r to its end, or until ctx ends: then it returns ctx's
// error at once, and a Read still blocked ends in the background.
func readAll(ctx context.Context, r io.Reader) ([]byte, error) {
	if ctx.Done() == nil {
		return io.ReadAll(r)
	}
	type result struct {
		buf []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		buf, err := io.ReadAll(r)
		done <- result{buf, err}
	}()
	select {
	case r := <-done:
		return r.buf, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
