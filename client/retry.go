package idemclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxPeek is how much of a 409 body is read to tell an in-progress
// conflict from the application's own; maxDrain is how much of a discarded
// response is read so its connection can be reused.
const (
	maxPeek  = 4 << 10
	maxDrain = 4 << 10
)

// InProgress is the default in-progress test (see WithInProgress). It
// reports whether body, the start of a 409 response's body, is JSON that
// says a request with the same key is still running: a problem whose
// "type" ends in "#conflict" or "/conflict" (idem's, whatever its
// configured base), or an "error" object whose "code" is
// "idempotency_key_in_use" (Stripe's).
func InProgress(_ *http.Response, body []byte) bool {
	var doc struct {
		Type  json.RawMessage `json:"type"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return false
	}
	var typ string
	if json.Unmarshal(doc.Type, &typ) == nil && (strings.HasSuffix(typ, "#conflict") || strings.HasSuffix(typ, "/conflict")) {
		return true
	}
	var e struct {
		Code string `json:"code"`
	}
	return json.Unmarshal(doc.Error, &e) == nil && e.Code == "idempotency_key_in_use"
}

// retryableStatus reports whether a response with this status may be
// retried: 409 only when it is in progress (decided by the caller).
func retryableStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryableError reports whether an attempt that failed with err may be
// retried: the connection was refused, reset or closed before the
// response (by the server, idle or not), HTTP/2 ended the stream in a way
// that says so (h2Retryable), or the response headers did not come in
// time. It never is once the request's own context has ended.
func retryableError(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || connErrno(err) || h2Retryable(err) {
		return true
	}
	if strings.Contains(err.Error(), "http: server closed idle connection") {
		// net/http's unexported errServerClosedIdle: the server closed a
		// kept-alive connection as the request went out on it (an
		// instance shutting down). The Transport retries it once itself;
		// when that attempt meets it too, the key makes another safe.
		return true
	}
	t, ok := errors.AsType[timeouter](err)
	return ok && t.Timeout()
}

// HTTP/2 error codes (RFC 9113, section 7).
const (
	h2InternalError = 0x2
	h2RefusedStream = 0x7
)

// h2StreamError has the fields of net/http's HTTP/2 StreamError (an
// RST_STREAM frame), whose As method fills any struct with these field
// names and convertible types: errors.As finds one without an import of
// golang.org/x/net.
type h2StreamError struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

func (e h2StreamError) Error() string {
	return fmt.Sprintf("stream error: stream ID %d; code %#x", e.StreamID, e.Code)
}

// h2Retryable reports whether err is net/http's HTTP/2 telling that the
// server ended the attempt's stream in a way that a retry may get past:
//   - RST_STREAM with REFUSED_STREAM: the server did not process it;
//   - RST_STREAM with INTERNAL_ERROR: the server failed while handling it
//     (a handler that panicked), as HTTP/1 ends the connection (EOF);
//   - a GOAWAY and a stream above its last stream ID: not processed;
//   - a GOAWAY with NO_ERROR (a graceful shutdown) or INTERNAL_ERROR, then
//     the connection closed with the stream open: as HTTP/1's EOF.
//
// Other codes (PROTOCOL_ERROR, CANCEL, ENHANCE_YOUR_CALM, ...) are not
// retried. net/http already retries REFUSED_STREAM and the first GOAWAY
// case itself, a few times, inside one attempt.
func h2Retryable(err error) bool {
	if se, ok := errors.AsType[h2StreamError](err); ok {
		return se.Code == h2RefusedStream || se.Code == h2InternalError
	}
	// The GOAWAY errors are not exported, nor convertible: their text is
	// all there is.
	msg := err.Error()
	if strings.Contains(msg, "http2: Transport received Server's graceful shutdown GOAWAY") {
		return true
	}
	if _, rest, ok := strings.Cut(msg, "http2: server sent GOAWAY and closed the connection; "); ok {
		// LastStreamID=1, ErrCode=NO_ERROR, debug="..."
		_, rest, _ = strings.Cut(rest, "ErrCode=")
		code, _, _ := strings.Cut(rest, ",")
		return code == "NO_ERROR" || code == "INTERNAL_ERROR"
	}
	return false
}

// parseRetryAfter returns the wait a Retry-After value asks for: a number
// of seconds, or an HTTP-date measured from date (the response's Date, so
// that clock skew does not matter) or, without one, from now. A date in
// the past means 0. ok is false for a value that is neither.
func parseRetryAfter(v, date string, now time.Time) (d time.Duration, ok bool) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return 0, false
	}
	if digits(v) {
		const maxSecs = int64(1<<63-1) / int64(time.Second)
		var n int64
		for i := 0; i < len(v); i++ {
			n = n*10 + int64(v[i]-'0')
			if n > maxSecs {
				return time.Duration(maxSecs) * time.Second, true
			}
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if ref, err := http.ParseTime(strings.Trim(date, " \t")); err == nil {
		now = ref
	}
	return max(at.Sub(now), 0), true
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// peek reads up to maxPeek bytes of resp's body and puts them back in front
// of the rest, so that the caller still gets the whole body.
func peek(resp *http.Response) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxPeek))
	resp.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(b), resp.Body), Closer: resp.Body}
	return b, err
}

type peekedBody struct {
	io.Reader
	io.Closer
}

// discard drains a little of a response the caller will not see, so the
// connection can be reused, and closes it.
func discard(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	_ = resp.Body.Close()
}
