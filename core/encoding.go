package idem

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// This file makes a replay something the retrying client accepts when the
// stored response is content-encoded: a compression middleware mounted
// inside idem (between idem and the handler) compresses the first answer
// for a client that accepted gzip, and a retry may not accept it. Mount
// compression outside idem instead: idem then stores the identity body,
// and the compressor encodes every answer, replays included, for the
// request in hand.

// maxDecoded bounds a body decoded for a replay, against a stored body
// that expands without end.
const maxDecoded = 64 << 20

// ErrNotAcceptable is why a replay cannot be given in a content coding the
// retry accepts (Engine.ReplayFor); Policy.Problem answers it 406.
var ErrNotAcceptable = errors.New("idem: the stored response's content coding is not one this request accepts")

// ReplayFor returns the stored response resp as a retry whose
// Accept-Encoding values are acceptEncoding can take, as the net/http
// middleware replays: resp itself, or a copy with the body decoded (gzip,
// deflate) when the retry does not accept the coding a compressor inside
// idem gave the first answer. The error wraps ErrNotAcceptable.
func (e *Engine) ReplayFor(resp *Response, acceptEncoding []string) (*Response, error) {
	return forRequest(resp, acceptEncoding)
}

// forRequest returns resp as the request with Accept-Encoding values ae
// can take: resp itself when its content coding (if any) is acceptable,
// or a copy with the body decoded (gzip, x-gzip, deflate) and the headers
// that described the encoded bytes dropped. It returns ErrNotAcceptable,
// wrapped with the reason, when the coding is neither acceptable nor one
// the engine can decode.
func forRequest(resp *Response, ae []string) (*Response, error) {
	codings := contentCodings(resp.Header["Content-Encoding"])
	if len(codings) == 0 || resp.BodyOmitted || len(resp.Body) == 0 {
		return resp, nil
	}
	if acceptsAll(ae, codings) {
		return resp, nil
	}
	body := resp.Body
	for i := len(codings) - 1; i >= 0; i-- {
		var err error
		if body, err = decode(codings[i], body); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNotAcceptable, err)
		}
	}
	out := &Response{Status: resp.Status, kind: resp.kind, Body: body, Header: make(http.Header, len(resp.Header))}
	for k, v := range resp.Header {
		if !describesBody(k) {
			out.Header[k] = v
		}
	}
	return out, nil
}

// contentCodings lists the codings of Content-Encoding values, in the
// order they were applied, leaving out identity.
func contentCodings(values []string) []string {
	var out []string
	for _, v := range values {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			if c != "" && c != "identity" {
				out = append(out, c)
			}
		}
	}
	return out
}

// acceptsAll reports whether Accept-Encoding values ae accept every one of
// codings. A request without Accept-Encoding accepts none: RFC 9110 lets
// a server send any coding then, but clients that send no such header
// (curl without --compressed, many HTTP libraries) cannot read one, and
// compression middleware does not compress for them either.
func acceptsAll(ae, codings []string) bool {
	for _, c := range codings {
		if !accepts(ae, c) {
			return false
		}
	}
	return true
}

// accepts reports whether Accept-Encoding values ae accept coding: named
// with a q-value above 0, or matched by "*" with one, and not refused by
// name.
func accepts(ae []string, coding string) bool {
	star := false
	for _, v := range ae {
		for item := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(item), ";")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "x-gzip" {
				name = "gzip"
			}
			q := qValue(params)
			switch name {
			case coding, alias(coding):
				return q > 0
			case "*":
				star = q > 0
			}
		}
	}
	return star
}

func alias(coding string) string {
	if coding == "x-gzip" {
		return "gzip"
	}
	return coding
}

// qValue returns the q parameter of an Accept-Encoding item's parameters,
// 1 when absent, 0 when malformed.
func qValue(params string) float64 {
	for p := range strings.SplitSeq(params, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
			q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || q < 0 || q > 1 {
				return 0
			}
			return q
		}
	}
	return 1
}

// decode undoes one content coding.
func decode(coding string, body []byte) ([]byte, error) {
	var r io.ReadCloser
	var err error
	switch coding {
	case "gzip", "x-gzip":
		r, err = gzip.NewReader(bytes.NewReader(body))
	case "deflate":
		r, err = zlib.NewReader(bytes.NewReader(body))
	default:
		return nil, fmt.Errorf("the engine cannot decode %q", coding)
	}
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", coding, err)
	}
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, maxDecoded+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("decoding %s: %w", coding, err)
	case len(out) > maxDecoded:
		return nil, fmt.Errorf("decoded %s body is over %d bytes", coding, maxDecoded)
	}
	return out, nil
}
