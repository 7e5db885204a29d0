package idem

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// This file is what a stored HTTP response looks like on the way in
// (storedHeader: which headers are kept) and on the way out (replay).

// replayHTTP writes a stored response, marked with the replay header.
func replayHTTP(w http.ResponseWriter, resp *Response, marker string) {
	// The stored values are copied into one new backing array (the store
	// may share them between replays; code after us may edit in place).
	n := 3
	for _, v := range resp.Header {
		n += len(v)
	}
	vals := make([]string, 0, n)
	h := w.Header()
	for k, v := range resp.Header {
		vals = append(vals, v...)
		h[k] = vals[len(vals)-len(v) : len(vals) : len(vals)]
	}
	vals = append(vals, "true")
	h[marker] = vals[len(vals)-1 : len(vals) : len(vals)]
	if resp.BodyOmitted {
		h[HeaderBodyOmitted] = h[marker][:1:1]
	}
	if bodyAllowed(resp.Status) {
		vals = append(vals, strconv.Itoa(len(resp.Body)))
		h["Content-Length"] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 && bodyAllowed(resp.Status) {
		_, _ = w.Write(resp.Body)
	}
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// storedHeader returns the handler's headers h as they are stored: without
// Set-Cookie, Date, Content-Length, the replay markers, hop-by-hop headers
// (including those named in Connection), headers that middleware outside
// the engine set and the handler left as they were (they are the current
// request's, such as X-Request-Id), and, when the body is omitted, the
// headers that describe the body; with allow (WithReplayedHeaders), also
// without every header allow does not name. It returns h itself when
// there is nothing to remove.
func storedHeader(h, outer http.Header, replayHeader string, omitted bool, allow map[string]bool) http.Header {
	drop := func(k string) bool {
		if allow != nil && !allow[k] {
			return true
		}
		switch k {
		case "Set-Cookie", "Date", "Content-Length", "Connection", "Keep-Alive", "Proxy-Connection",
			"Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
			replayHeader, HeaderBodyOmitted, HeaderSealed:
			return true
		default:
			if omitted && describesBody(k) {
				return true
			}
		}
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
		if ov, ok := outer[k]; ok && slices.Equal(ov, h[k]) {
			return true
		}
		for _, v := range h["Connection"] {
			for f := range strings.SplitSeq(v, ",") {
				if http.CanonicalHeaderKey(strings.TrimSpace(f)) == k {
					return true
				}
			}
		}
		return false
	}
	n := 0
	for k := range h {
		if drop(k) {
			n++
		}
	}
	if n == 0 {
		return h
	}
	out := make(http.Header, len(h)-n)
	for k, v := range h {
		if !drop(k) {
			out[k] = v
		}
	}
	return out
}

// describesBody reports whether the header k describes the body's bytes,
// so it is dropped when the body is omitted.
func describesBody(k string) bool {
	switch k {
	case "Content-Encoding", "Content-Range", "Content-Md5", "Digest", "Content-Digest", "Repr-Digest", "Etag":
		return true
	}
	return false
}

// WithoutBody returns r with its body omitted, as the engine stores a
// response larger than its cap: no Body, BodyOmitted set, and without the
// headers that describe the body's bytes (Content-Encoding, ETag, digests).
// r is not changed. A store that must drop a body to stay within a memory
// bound stores this instead.
func (r Response) WithoutBody() Response {
	out := Response{Status: r.Status, kind: r.kind, BodyOmitted: true}
	if r.Header != nil {
		out.Header = make(http.Header, len(r.Header))
		for k, v := range r.Header {
			if !describesBody(k) {
				out.Header[k] = v
			}
		}
	}
	return out
}

// ReplayHeader returns the headers a replay of resp sends, for transports
// that write their own responses: resp's stored headers, the replay
// marker (WithReplayHeader) set to "true", Idempotent-Body-Omitted when
// the body was not kept, and Content-Length when the status has a body.
// The result is a new map; resp is not changed.
func (p *Policy) ReplayHeader(resp *Response) http.Header {
	h := make(http.Header, len(resp.Header)+3)
	for k, v := range resp.Header {
		h[k] = slices.Clone(v)
	}
	h.Set(p.h.replayHeader, "true")
	if resp.BodyOmitted {
		h.Set(HeaderBodyOmitted, "true")
	}
	if bodyAllowed(resp.Status) {
		h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	}
	return h
}
