package idemclient

import (
	"math"
	"testing"
	"testing/synctest"
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
