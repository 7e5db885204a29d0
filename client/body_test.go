package idemclient

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestBufferLimit buffers a body without GetBody under limits around its
// length, up to math.MaxInt64 ("no limit"): a body within the limit is
// sent whole and retried with the same bytes; a longer one is sent whole,
// once.
func TestBufferLimit(t *testing.T) {
	const body = `{"item":"book"}` // 15 bytes
	for _, tc := range []struct {
		name     string
		limit    int64
		attempts int // 2 when the body could be replayed after a dropped first attempt
	}{
		{"no limit", math.MaxInt64, 2},
		{"just under no limit", math.MaxInt64 - 1, 2},
		{"the body's length", int64(len(body)), 2},
		{"one byte short", int64(len(body)) - 1, 1},
		{"one byte", 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &fakeServer{steps: []step{drop}}
				tr := newTransport(t, pipeServer(t, srv), WithMaxBufferedBody(tc.limit))
				_, _, err := post(t, t.Context(), tr, body)
				if replayable := tc.attempts > 1; replayable != (err == nil) {
					t.Errorf("error %v; want one only when the body cannot be replayed", err)
				}
				checkBodies(t, srv, tc.attempts, body)
			})
		})
	}
}

// TestBufferingFails checks what RoundTrip returns when a body without
// GetBody cannot be buffered before the first attempt: the producer fails,
// stalls past the context's deadline (whether or not closing the body
// unblocks its Read), or the context has already ended. Each time nothing
// is sent, the body is closed, RoundTrip returns when the cause happens,
// and the error is an *Error with the key, no attempt, and the cause.
func TestBufferingFails(t *testing.T) {
	errDisk := errors.New("disk on fire")
	for _, tc := range []struct {
		name string
		// body returns the request body and a function that ends a
		// producer still blocked when the test ends.
		body    func() (rc io.ReadCloser, release func())
		timeout time.Duration // the context's; -1 for one already ended
		want    error
		after   time.Duration // when RoundTrip returns
	}{
		{"the producer fails", func() (io.ReadCloser, func()) { return io.NopCloser(failingReader{errDisk}), func() {} }, time.Second, errDisk, 0},
		{"a stalled pipe: closed at the deadline", func() (io.ReadCloser, func()) {
			r, w := io.Pipe()
			return r, func() { w.Close() }
		}, time.Second, context.DeadlineExceeded, time.Second},
		{"a stalled producer that ignores Close", func() (io.ReadCloser, func()) {
			b := &stallingBody{unblock: make(chan struct{})}
			return b, func() { close(b.unblock) }
		}, time.Second, context.DeadlineExceeded, time.Second},
		{"the context ended before", func() (io.ReadCloser, func()) { return io.NopCloser(&onlyReader{s: "x"}), func() {} }, -1, context.Canceled, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &fakeServer{}
				tr := newTransport(t, pipeServer(t, srv))
				ctx, cancel := context.WithTimeout(t.Context(), tc.timeout)
				defer cancel()
				if tc.timeout < 0 {
					ctx, cancel = context.WithCancel(t.Context())
					cancel()
				}
				rc, release := tc.body()
				release = sync.OnceFunc(release)
				defer release()
				body := &closeCounter{ReadCloser: rc}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://pipe/orders", body)
				req.Header.Set(DefaultKeyHeader, "k1")
				start := time.Now()
				type result struct {
					err error
					at  time.Time
				}
				done := make(chan result, 1)
				go func() {
					resp, err := tr.RoundTrip(req)
					if resp != nil {
						resp.Body.Close()
					}
					done <- result{err, time.Now()}
				}()
				var r result
				select {
				case r = <-done:
				case <-time.After(time.Minute):
					t.Errorf("RoundTrip still blocked a minute after the context's deadline")
					release()
					r = <-done
				}
				err := r.err
				e, ok := errors.AsType[*Error](err)
				if !ok || e.Key != "k1" || e.Attempts != 0 || !errors.Is(err, tc.want) {
					t.Fatalf("error %#v; want an *Error with key k1, no attempt, wrapping %v", err, tc.want)
				}
				if !strings.HasPrefix(err.Error(), "idemclient: not sent: ") {
					t.Errorf("message %q: want it to say the request was not sent", err)
				}
				if d := r.at.Sub(start); d != tc.after {
					t.Errorf("returned after %v, want %v", d, tc.after)
				}
				if tc.want == context.DeadlineExceeded && !e.Timeout() {
					t.Error("Timeout() is false after the context's deadline")
				}
				if n := len(srv.seen()); n != 0 {
					t.Errorf("%d requests reached the server", n)
				}
				if n := body.closed.Load(); n == 0 {
					t.Error("the body was not closed")
				}
			})
		})
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

// stallingBody blocks in Read until unblock is closed, even once it is
// itself closed.
type stallingBody struct{ unblock chan struct{} }

func (b *stallingBody) Read([]byte) (int, error) { <-b.unblock; return 0, io.EOF }
func (b *stallingBody) Close() error             { return nil }

// closeCounter counts the calls to Close, which may come from another
// goroutine.
type closeCounter struct {
	io.ReadCloser
	closed atomic.Int32
}

func (b *closeCounter) Close() error { b.closed.Add(1); return b.ReadCloser.Close() }
