package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
)

// TestExtendBatchOneRoundTrip: the heartbeat's beat over many claims is
// one pipelined round trip, also when Redis has lost its script cache
// (one more round trip, by source).
func TestExtendBatchOneRoundTrip(t *testing.T) {
	client := testClient(t)
	hook := &countHook{}
	client.AddHook(hook)
	s := newTestStore(t, client)
	warmUp(t, s)
	ctx := t.Context()
	now := time.Now()
	const n = 20
	refs := make([]store.Extension, n)
	for i := range refs {
		key := "k" + strconv.Itoa(i)
		if _, err := s.Claim(ctx, store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		refs[i] = store.Extension{Hold: holdOf("s", key, "tok"), LeaseEnd: now.Add(time.Hour)}
	}
	refs[3].Token = "another"
	s.ExtendBatch(ctx, now, refs) // the pool dials its connection (HELLO, CLIENT) here, not below
	for _, flush := range []bool{false, true} {
		if flush {
			if err := client.ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		hook.take()
		errs := s.ExtendBatch(ctx, now, refs)
		trips, names := hook.take()
		want := 1
		if flush {
			want = 2 // EVALSHA answered NOSCRIPT, then EVAL
		}
		if trips != want || len(names) != n*want {
			t.Errorf("flushed %v: %d round trips, %d commands (%v); want %d and %d", flush, trips, len(names), names, want, n*want)
		}
		for i, err := range errs {
			if (i == 3) != (err != nil) {
				t.Errorf("flushed %v: ref %d: %v", flush, i, err)
			}
		}
	}
	rec, ok, err := s.Get(ctx, refOf("s", "k0"), now)
	if err != nil || !ok || !rec.LeaseEnd.Equal(now.Add(time.Hour).Truncate(time.Millisecond)) && !rec.LeaseEnd.Equal(now.Add(time.Hour)) {
		t.Errorf("lease end after the batch: %v %v %v", rec.LeaseEnd, ok, err)
	}
}
