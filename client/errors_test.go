package idemclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func TestRetryableError(t *testing.T) {
	live := context.Background()
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	opErr := func(op string, errno syscall.Errno) error {
		return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, errno)}
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"EOF", live, io.EOF, true},
		{"unexpected EOF", live, fmt.Errorf("net/http: transport: %w", io.ErrUnexpectedEOF), true},
		{"reset", live, opErr("read", syscall.ECONNRESET), true},
		{"refused", live, opErr("dial", syscall.ECONNREFUSED), true},
		{"aborted", live, opErr("read", syscall.ECONNABORTED), true},
		{"broken pipe", live, fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", opErr("write", syscall.EPIPE)), true},
		{"header timeout", live, timeoutErr{}, true},
		{"another context's deadline", live, context.DeadlineExceeded, true},
		{"in a url.Error", live, &url.Error{Op: "Post", URL: "http://x", Err: io.EOF}, true},
		{"server closed idle connection", live, &url.Error{Op: "Post", URL: "http://x", Err: errors.New("http: server closed idle connection")}, true},
		{"HTTP/2 REFUSED_STREAM", live, h2StreamError{StreamID: 1, Code: h2RefusedStream}, true},
		{"HTTP/2 INTERNAL_ERROR", live, &url.Error{Op: "Post", URL: "http://x", Err: h2StreamError{StreamID: 3, Code: h2InternalError, Cause: errors.New("received from peer")}}, true},
		{"HTTP/2 PROTOCOL_ERROR", live, h2StreamError{StreamID: 1, Code: 0x1}, false},
		{"HTTP/2 CANCEL", live, h2StreamError{StreamID: 1, Code: 0x8}, false},
		{"HTTP/2 REFUSED_STREAM after the context ended", dead, h2StreamError{StreamID: 1, Code: h2RefusedStream}, false},
		{"GOAWAY above the last stream", live, errors.New("http2: Transport received Server's graceful shutdown GOAWAY"), true},
		{"GOAWAY NO_ERROR, then closed", live, goAway("NO_ERROR", ""), true},
		{"GOAWAY INTERNAL_ERROR, then closed", live, goAway("INTERNAL_ERROR", ""), true},
		{"GOAWAY ENHANCE_YOUR_CALM, then closed", live, goAway("ENHANCE_YOUR_CALM", ""), false},
		{"GOAWAY PROTOCOL_ERROR whose debug data looks retryable", live, goAway("PROTOCOL_ERROR", "ErrCode=NO_ERROR, "), false},
		{"the caller's deadline", dead, context.DeadlineExceeded, false},
		{"EOF after the context ended", dead, io.EOF, false},
		{"cancelled", live, context.Canceled, false},
		{"TLS", live, tls.RecordHeaderError{Msg: "tls: first record does not look like a TLS handshake"}, false},
		{"no route", live, opErr("dial", syscall.EHOSTUNREACH), false},
		{"DNS", live, &net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true}, false},
		{"malformed response", live, errors.New(`net/http: HTTP/1.x transport connection broken: malformed HTTP response "x"`), false},
	} {
		if got := retryableError(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: retryable %v, want %v", tc.name, got, tc.want)
		}
	}
}

// goAway returns the error net/http's HTTP/2 transport gives for a server
// that sent GOAWAY with code, then closed the connection.
func goAway(code, debug string) error {
	return fmt.Errorf("http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=%s, debug=%q", code, debug)
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "net/http: timeout awaiting response headers" }
func (timeoutErr) Timeout() bool { return true }

// TestResponseHeaderTimeout retries an attempt that the base transport
// cut short because the headers did not come in time.
func TestResponseHeaderTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &fakeServer{steps: []step{func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }}}
		base := pipeServer(t, srv)
		base.ResponseHeaderTimeout = time.Second
		tr := newTransport(t, base)
		start := time.Now()
		resp, body, err := post(t, t.Context(), tr, "x")
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := ResultOf(resp); body != "created" || r.Attempts != 2 || time.Since(start) != time.Second+100*time.Millisecond {
			t.Errorf("got %q after %d attempts and %v", body, r.Attempts, time.Since(start))
		}
	})
}

// TestConnectionReset sends through a real loopback socket that the server
// resets (RST) after reading the first request, then answers.
func TestConnectionReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var keys []string
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			req, err := http.ReadRequest(br)
			if err != nil {
				c.Close()
				continue
			}
			io.Copy(io.Discard, req.Body)
			keys = append(keys, req.Header.Get(DefaultKeyHeader))
			if i == 0 {
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
				continue
			}
			io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Length: 7\r\nConnection: close\r\n\r\ncreated")
			c.Close()
		}
	}()
	var errs []error
	tr := newTransport(t, &http.Transport{}, WithOnAttempt(func(a Attempt) { errs = append(errs, a.Err) }))
	tr.cfg.retry.jitter = func(time.Duration) time.Duration { return 0 }
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://"+ln.Addr().String()+"/orders", &onlyReader{s: "order"})
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(errs) != 2 || !errors.Is(errs[0], syscall.ECONNRESET) || errs[1] != nil {
		t.Errorf("attempt errors %v, want a reset then none", errs)
	}
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("keys %q, want the same key twice", keys)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	date := now.Format(http.TimeFormat)
	for _, tc := range []struct {
		v, date string
		want    time.Duration
		ok      bool
	}{
		{"0", "", 0, true},
		{"7", "", 7 * time.Second, true},
		{" \t120 ", "", 2 * time.Minute, true},
		{"0003", "", 3 * time.Second, true},
		{"99999999999999999999999", "", time.Duration(1<<63-1) / time.Second * time.Second, true},
		{"Mon, 30 Nov 2026 08:00:05 GMT", "", 5 * time.Second, true},                              // IMF-fixdate
		{"Monday, 30-Nov-26 08:00:05 GMT", "", 5 * time.Second, true},                             // RFC 850
		{"Mon Nov 30 08:00:05 2026", "", 5 * time.Second, true},                                   // asctime
		{"Mon, 30 Nov 2026 07:59:00 GMT", "", 0, true},                                            // in the past
		{"Mon, 30 Nov 2026 09:00:05 GMT", "Mon, 30 Nov 2026 09:00:00 GMT", 5 * time.Second, true}, // read against Date
		{"Mon, 30 Nov 2026 08:00:05 GMT", "garbage", 5 * time.Second, true},
		{"", "", 0, false},
		{"-1", "", 0, false},
		{"+1", "", 0, false},
		{"1.5", "", 0, false},
		{"1 2", "", 0, false},
		{"soon", "", 0, false},
		{"Mon, 30 Nov 2026 08:00:05", date, 0, false},
	} {
		d, ok := parseRetryAfter(tc.v, tc.date, now)
		if d != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q, %q) = %v, %v; want %v, %v", tc.v, tc.date, d, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "1", "120", " 5 ", "-1", "1.5", "99999999999999999999", "", "Fri, 31 Dec 1999 23:59:59 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"} {
		f.Add(s, "Sat, 01 Jan 2000 00:00:00 GMT")
	}
	now := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	const maxSecs = int64(1<<63-1) / int64(time.Second)
	f.Fuzz(func(t *testing.T, v, date string) {
		d, ok := parseRetryAfter(v, date, now)
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("parseRetryAfter(%q, %q) = %v, %v", v, date, d, ok)
		}
		trimmed := strings.Trim(v, " \t")
		if digits(trimmed) {
			want := maxSecs
			if n, err := strconv.ParseInt(trimmed, 10, 64); err == nil && n < maxSecs {
				want = n
			}
			if !ok || d != time.Duration(want)*time.Second {
				t.Fatalf("parseRetryAfter(%q) = %v, %v; want %ds", v, d, ok, want)
			}
			return
		}
		if _, err := http.ParseTime(trimmed); (err == nil) != ok {
			t.Fatalf("parseRetryAfter(%q) = %v, %v; http.ParseTime says %v", v, d, ok, err)
		}
	})
}
