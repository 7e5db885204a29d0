package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

// testStore checks the store contract of core/store.go, with an
// emphasis on what is specific to this store (nanosecond time comparisons
// inside Lua, binary-safe records, notifications through Pub/Sub). It
// complements conformance.RunStore.
func testStore(t *testing.T, newStore func(t *testing.T) *Store) {
	// base has a nanosecond part on purpose: the scripts must compare
	// times exactly, which Lua numbers (doubles) cannot.
	base := time.Now().Truncate(time.Second).Add(123456789)
	const lease = 5 * time.Minute
	const retention = 24 * time.Hour

	claim := func(t *testing.T, s *Store, key, fp, token string, now time.Time) store.ClaimResult {
		t.Helper()
		res, err := s.Claim(t.Context(), store.Claim{
			Scope: "scope", Key: key, Fingerprint: fp, Token: token, Now: now, LeaseEnd: now.Add(lease),
		})
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		if res.Acquired == (res.Existing != nil) {
			t.Fatalf("Claim: Acquired=%v with Existing=%v", res.Acquired, res.Existing)
		}
		return res
	}
	// The result's bytes are opaque to the store: any bytes come back.
	resp := store.Result{
		Head: []byte("\x01head\x00\xff\xc8\x01"),
		Body: []byte("{\"id\":1}\x00\xff"),
	}

	t.Run("ClaimThenExisting", func(t *testing.T) {
		s := newStore(t)
		if res := claim(t, s, "k", "fp1", "tok1", base); !res.Acquired {
			t.Fatal("first claim not acquired")
		}
		res := claim(t, s, "k", "fp2", "tok2", base.Add(time.Second))
		if res.Acquired {
			t.Fatal("second claim acquired while the first holds the lease")
		}
		want := store.Record{
			Fingerprint: "fp1", State: store.InProgress,
			CreatedAt: base, LeaseEnd: base.Add(lease), ExpiresAt: base.Add(lease),
		}
		checkRecord(t, *res.Existing, want)
	})

	t.Run("LeaseBoundaryNanosecond", func(t *testing.T) {
		s := newStore(t)
		claim(t, s, "k", "fp", "tok1", base)
		end := base.Add(lease)
		if res := claim(t, s, "k", "fp", "tok2", end.Add(-time.Nanosecond)); res.Acquired {
			t.Fatal("claim 1ns before the lease end was acquired")
		}
		if err := s.Complete(t.Context(), holdOf("scope", "k", "tok1"), completion(resp, end.Add(-time.Nanosecond), end.Add(retention))); err != nil {
			t.Fatalf("Complete 1ns before the lease end: %v", err)
		}
		exp := end.Add(retention)
		if res := claim(t, s, "k", "fp", "tok3", exp.Add(-time.Nanosecond)); res.Acquired {
			t.Fatal("claim 1ns before expiry was acquired")
		}
		if res := claim(t, s, "k", "fp", "tok3", exp); !res.Acquired {
			t.Fatal("claim at expiry was not acquired")
		}
	})

	t.Run("TakeoverAfterLease", func(t *testing.T) {
		s := newStore(t)
		claim(t, s, "k", "fp", "old", base)
		end := base.Add(lease)
		if res := claim(t, s, "k", "fp", "new", end); !res.Acquired {
			t.Fatal("claim at the lease end was not acquired")
		}
		if err := s.Release(t.Context(), holdOf("scope", "k", "old")); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("Release with the old token = %v, want ErrLeaseLost", err)
		}
		if err := s.Complete(t.Context(), holdOf("scope", "k", "old"), completion(resp, end, end.Add(retention))); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("Complete with the old token = %v, want ErrLeaseLost", err)
		}
		if err := s.Extend(t.Context(), holdOf("scope", "k", "old"), end, end.Add(lease)); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("Extend with the old token = %v, want ErrLeaseLost", err)
		}
		if err := s.Complete(t.Context(), holdOf("scope", "k", "new"), completion(resp, end, end.Add(retention))); err != nil {
			t.Fatalf("Complete by the new owner: %v", err)
		}
		if err := s.Evict(t.Context(), holdOf("scope", "k", "old")); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("Evict with the old token = %v, want ErrLeaseLost", err)
		}
	})

	// A lease that ended while nobody took the key over still belongs to
	// its token: a late Extend or Complete lands, to the nanosecond past
	// the lease end and well after it, and the completed record keeps the
	// token for Evict.
	t.Run("LateCallsLand", func(t *testing.T) {
		for _, late := range []time.Duration{0, time.Nanosecond, lease - time.Nanosecond} {
			t.Run(late.String(), func(t *testing.T) {
				s := newStore(t)
				claim(t, s, "k", "fp", "tok", base)
				end := base.Add(lease)
				now := end.Add(late)
				if err := s.Extend(t.Context(), holdOf("scope", "k", "tok"), now, now.Add(lease)); err != nil {
					t.Fatalf("Extend %v past the lease end: %v", late, err)
				}
				now = now.Add(lease + late)
				if err := s.Complete(t.Context(), holdOf("scope", "k", "tok"), completion(resp, now, now.Add(retention))); err != nil {
					t.Fatalf("Complete %v past the extended lease end: %v", late, err)
				}
				res := claim(t, s, "k", "fp", "tok2", now)
				checkRecord(t, *res.Existing, store.Record{
					Fingerprint: "fp", State: store.Completed, Result: resp,
					CreatedAt: base, ExpiresAt: now.Add(retention),
				})
				if err := s.Evict(t.Context(), holdOf("scope", "k", "tok2")); !errors.Is(err, store.ErrLeaseLost) {
					t.Fatalf("Evict of the completed record with another token = %v, want ErrLeaseLost", err)
				}
				if err := s.Evict(t.Context(), holdOf("scope", "k", "tok")); err != nil {
					t.Fatalf("Evict of the completed record with its token: %v", err)
				}
				if res := claim(t, s, "k", "fp", "tok3", now); !res.Acquired {
					t.Fatal("claim after Evict not acquired")
				}
			})
		}
	})

	t.Run("CompleteAndReplay", func(t *testing.T) {
		s := newStore(t)
		claim(t, s, "k", "fp", "tok", base)
		now := base.Add(time.Second)
		exp := now.Add(retention)
		if err := s.Complete(t.Context(), holdOf("scope", "k", "tok"), completion(resp, now, exp)); err != nil {
			t.Fatal(err)
		}
		res := claim(t, s, "k", "fp", "tok2", now.Add(time.Hour))
		if res.Acquired {
			t.Fatal("claim of a completed record was acquired")
		}
		checkRecord(t, *res.Existing, store.Record{
			Fingerprint: "fp", State: store.Completed, Result: resp,
			CreatedAt: base, ExpiresAt: exp,
		})
		// Second Complete, Release and Extend on a completed record fail.
		if err := s.Complete(t.Context(), holdOf("scope", "k", "tok"), completion(resp, now, exp)); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("second Complete = %v, want ErrLeaseLost", err)
		}
		if err := s.Release(t.Context(), holdOf("scope", "k", "tok")); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("Release of a completed record = %v, want ErrLeaseLost", err)
		}
		if err := s.Extend(t.Context(), holdOf("scope", "k", "tok"), now, now.Add(lease)); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("Extend of a completed record = %v, want ErrLeaseLost", err)
		}
		if _, ok, err := s.Get(t.Context(), refOf("scope", "k"), now); err != nil || !ok {
			t.Fatalf("completed record gone after a refused Release: ok=%v err=%v", ok, err)
		}
	})

	t.Run("WrongToken", func(t *testing.T) {
		s := newStore(t)
		claim(t, s, "k", "fp", "tok", base)
		for name, err := range map[string]error{
			"Complete": s.Complete(t.Context(), holdOf("scope", "k", "other"), completion(resp, base, base.Add(retention))),
			"Release":  s.Release(t.Context(), holdOf("scope", "k", "other")),
			"Extend":   s.Extend(t.Context(), holdOf("scope", "k", "other"), base, base.Add(time.Hour)),
		} {
			if !errors.Is(err, store.ErrLeaseLost) {
				t.Errorf("%s with another token = %v, want ErrLeaseLost", name, err)
			}
		}
		// No record at all.
		if err := s.Complete(t.Context(), holdOf("scope", "none", "tok"), completion(resp, base, base.Add(retention))); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("Complete without a record = %v, want ErrLeaseLost", err)
		}
		if err := s.Release(t.Context(), holdOf("scope", "none", "tok")); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("Release without a record = %v, want ErrLeaseLost", err)
		}
		rec, ok, err := s.Get(t.Context(), refOf("scope", "k"), base)
		if err != nil || !ok || rec.State != store.InProgress {
			t.Fatalf("record changed by refused calls: %+v ok=%v err=%v", rec, ok, err)
		}
	})

	t.Run("Release", func(t *testing.T) {
		s := newStore(t)
		claim(t, s, "k", "fp", "tok", base)
		if err := s.Release(t.Context(), holdOf("scope", "k", "tok")); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.Get(t.Context(), refOf("scope", "k"), base); ok {
			t.Fatal("record still there after Release")
		}
		if res := claim(t, s, "k", "fp", "tok2", base); !res.Acquired {
			t.Fatal("claim after Release not acquired")
		}
	})

	t.Run("Extend", func(t *testing.T) {
		s := newStore(t)
		claim(t, s, "k", "fp", "tok", base)
		now := base.Add(lease - time.Second)
		newEnd := now.Add(lease)
		if err := s.Extend(t.Context(), holdOf("scope", "k", "tok"), now, newEnd); err != nil {
			t.Fatal(err)
		}
		rec, ok, err := s.Get(t.Context(), refOf("scope", "k"), now)
		if err != nil || !ok {
			t.Fatalf("Get: ok=%v err=%v", ok, err)
		}
		checkRecord(t, rec, store.Record{Fingerprint: "fp", State: store.InProgress, CreatedAt: base, LeaseEnd: newEnd, ExpiresAt: newEnd})
		if res := claim(t, s, "k", "fp", "tok2", base.Add(lease)); res.Acquired {
			t.Fatal("claim at the old lease end acquired an extended claim")
		}
		// At the lease end the claim is still its token's while nobody
		// took it over.
		if err := s.Extend(t.Context(), holdOf("scope", "k", "tok"), newEnd, newEnd.Add(lease)); err != nil {
			t.Fatalf("Extend at the lease end = %v, want it to land", err)
		}
		if res := claim(t, s, "k", "fp", "tok2", newEnd.Add(lease)); !res.Acquired {
			t.Fatal("claim at the lease end was not acquired")
		}
		if err := s.Extend(t.Context(), holdOf("scope", "k", "tok"), newEnd.Add(lease), newEnd.Add(2*lease)); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("Extend after a takeover = %v, want ErrLeaseLost", err)
		}
	})

	t.Run("Get", func(t *testing.T) {
		s := newStore(t)
		if _, ok, err := s.Get(t.Context(), refOf("scope", "k"), base); ok || err != nil {
			t.Fatalf("Get without a record: ok=%v err=%v", ok, err)
		}
		claim(t, s, "k", "fp", "tok", base)
		if _, ok, _ := s.Get(t.Context(), refOf("scope", "k"), base.Add(lease)); ok {
			t.Fatal("Get returned an in-progress record past its lease")
		}
		exp := base.Add(retention)
		if err := s.Complete(t.Context(), holdOf("scope", "k", "tok"), completion(resp, base, exp)); err != nil {
			t.Fatal(err)
		}
		rec, ok, err := s.Get(t.Context(), refOf("scope", "k"), exp.Add(-time.Nanosecond))
		if err != nil || !ok {
			t.Fatalf("Get: ok=%v err=%v", ok, err)
		}
		checkRecord(t, rec, store.Record{Fingerprint: "fp", State: store.Completed, Result: resp, CreatedAt: base, ExpiresAt: exp})
		if _, ok, _ := s.Get(t.Context(), refOf("scope", "k"), exp); ok {
			t.Fatal("Get returned a record at its expiry")
		}
	})

	t.Run("Delete", func(t *testing.T) {
		s := newStore(t)
		if ok, err := s.Delete(t.Context(), refOf("scope", "k")); ok || err != nil {
			t.Fatalf("Delete without a record = %v, %v", ok, err)
		}
		claim(t, s, "k", "fp", "tok", base)
		if err := s.Complete(t.Context(), holdOf("scope", "k", "tok"), completion(resp, base, base.Add(retention))); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Delete(t.Context(), refOf("scope", "k")); !ok || err != nil {
			t.Fatalf("Delete = %v, %v", ok, err)
		}
		if res := claim(t, s, "k", "fp", "tok2", base); !res.Acquired {
			t.Fatal("claim after Delete not acquired")
		}
	})

	t.Run("Identity", func(t *testing.T) {
		s := newStore(t)
		pairs := [][2]string{{"a", "bc"}, {"ab", "c"}, {"", "abc"}, {"abc", "x"}, {"1:a", "b"}, {"{", "}"}, {"\x00", "k"}}
		for _, p := range pairs {
			res, err := s.Claim(t.Context(), store.Claim{Scope: p[0], Key: p[1], Fingerprint: p[0] + "|" + p[1], Token: "t", Now: base, LeaseEnd: base.Add(lease)})
			if err != nil || !res.Acquired {
				t.Fatalf("Claim(%q, %q): acquired=%v err=%v", p[0], p[1], res.Acquired, err)
			}
		}
		for _, p := range pairs {
			rec, ok, err := s.Get(t.Context(), refOf(p[0], p[1]), base)
			if err != nil || !ok || rec.Fingerprint != p[0]+"|"+p[1] {
				t.Fatalf("Get(%q, %q) = %+v, %v, %v", p[0], p[1], rec, ok, err)
			}
		}
	})

	t.Run("ConcurrentClaims", func(t *testing.T) {
		s := newStore(t)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				res, err := s.Claim(context.Background(), store.Claim{Scope: "scope", Key: "k", Fingerprint: "fp", Token: fmt.Sprint(i), Now: base, LeaseEnd: base.Add(lease)})
				if err != nil {
					t.Error(err)
				}
				if res.Acquired {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("%d of 20 concurrent claims acquired, want 1", n)
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		s := newStore(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := s.Claim(ctx, store.Claim{Scope: "scope", Key: "k", Fingerprint: "fp", Token: "t", Now: base, LeaseEnd: base.Add(lease)}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Claim with a cancelled context = %v", err)
		}
		if _, _, err := s.Watch(ctx, refOf("scope", "k")); !errors.Is(err, context.Canceled) {
			t.Fatalf("Watch with a cancelled context = %v", err)
		}
	})

	t.Run("Watch", func(t *testing.T) {
		s := newStore(t)
		subscribed(t, s)
		steps := []struct {
			name string
			do   func(t *testing.T, key string)
		}{
			{"Complete", func(t *testing.T, key string) {
				if err := s.Complete(t.Context(), holdOf("scope", key, "tok"), completion(resp, base, base.Add(retention))); err != nil {
					t.Fatal(err)
				}
			}},
			{"Release", func(t *testing.T, key string) {
				if err := s.Release(t.Context(), holdOf("scope", key, "tok")); err != nil {
					t.Fatal(err)
				}
			}},
			{"Delete", func(t *testing.T, key string) {
				if ok, err := s.Delete(t.Context(), refOf("scope", key)); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}},
			{"Evict", func(t *testing.T, key string) {
				if err := s.Evict(t.Context(), holdOf("scope", key, "tok")); err != nil {
					t.Fatal(err)
				}
			}},
		}
		for _, step := range steps {
			t.Run(step.name, func(t *testing.T) {
				key := "watch-" + step.name
				claim(t, s, key, "fp", "tok", base)
				claim(t, s, "unrelated-"+step.name, "fp", "tok", base)
				ch, stop, err := s.Watch(t.Context(), refOf("scope", key))
				if err != nil {
					t.Fatal(err)
				}
				defer stop()
				other, stopOther, err := s.Watch(t.Context(), refOf("scope", "unrelated-"+step.name))
				if err != nil {
					t.Fatal(err)
				}
				defer stopOther()
				step.do(t, key)
				select {
				case <-ch:
				case <-time.After(5 * time.Second):
					t.Fatalf("watch not woken by %s", step.name)
				}
				select {
				case <-other:
					t.Fatalf("watch of another key woken by %s", step.name)
				case <-time.After(50 * time.Millisecond):
				}
			})
		}
	})

	t.Run("WatchShared", func(t *testing.T) {
		s := newStore(t)
		subscribed(t, s)
		const n = 1000
		for i := range 10 {
			claim(t, s, fmt.Sprint("k", i), "fp", "tok", base)
		}
		chans := make([]<-chan struct{}, n)
		for i := range n {
			ch, stop, err := s.Watch(t.Context(), refOf("scope", fmt.Sprint("k", i%10)))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			chans[i] = ch
		}
		if got := numSub(t, s); got != 1 {
			t.Fatalf("%d subscriptions on %s for %d watches, want 1", got, s.Channel(), n)
		}
		if ok, err := s.Delete(t.Context(), refOf("scope", "absent")); ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, err := s.Delete(t.Context(), refOf("scope", "k3")); !ok || err != nil {
			t.Fatal(ok, err)
		}
		for i, ch := range chans {
			want := i%10 == 3
			select {
			case <-ch:
				if !want {
					t.Fatalf("watch %d (k%d) woken", i, i%10)
				}
			case <-time.After(time.Duration(map[bool]int{true: 5000, false: 0}[want]) * time.Millisecond):
				if want {
					t.Fatalf("watch %d (k3) not woken", i)
				}
			}
		}
	})

	t.Run("WatchStopAndClose", func(t *testing.T) {
		s := newStore(t)
		ch, stop, err := s.Watch(t.Context(), refOf("scope", "k"))
		if err != nil {
			t.Fatal(err)
		}
		stop()
		stop() // idempotent
		ch2, stop2, err := s.Watch(t.Context(), refOf("scope", "k"))
		if err != nil {
			t.Fatal(err)
		}
		defer stop2()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch2:
		case <-time.After(time.Second):
			t.Fatal("Close did not wake a pending watch")
		}
		select {
		case <-ch:
			t.Fatal("a stopped watch was woken")
		default:
		}
		if _, _, err := s.Watch(t.Context(), refOf("scope", "k")); !errors.Is(err, ErrClosed) {
			t.Fatalf("Watch after Close = %v, want ErrClosed", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

// subscribed opens s's subscription and waits until Redis has confirmed
// it, so that watches taken afterwards are not woken by its coming up.
func subscribed(t *testing.T, s *Store) {
	t.Helper()
	_, stop, err := s.Watch(t.Context(), refOf("", ""))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	deadline := time.Now().Add(5 * time.Second)
	for !s.hub.up() {
		if time.Now().After(deadline) {
			t.Fatal("the subscription did not come up within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkRecord compares records, times with Equal.
func checkRecord(t *testing.T, got, want store.Record) {
	t.Helper()
	if got.Fingerprint != want.Fingerprint || got.State != want.State ||
		!got.CreatedAt.Equal(want.CreatedAt) || !got.LeaseEnd.Equal(want.LeaseEnd) || !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Errorf("record = %+v\nwant       %+v", got, want)
	}
	// A nil and an empty Body may come back alike.
	if !bytes.Equal(got.Result.Head, want.Result.Head) || !bytes.Equal(got.Result.Body, want.Result.Body) ||
		got.Result.BodyOmitted != want.Result.BodyOmitted {
		t.Errorf("result = %#v\nwant       %#v", got.Result, want.Result)
	}
}

func TestStore(t *testing.T) {
	client := testClient(t)
	testStore(t, func(t *testing.T) *Store { return newTestStore(t, client) })
}

func TestStoreCluster(t *testing.T) {
	client := startCluster(t)
	testStore(t, func(t *testing.T) *Store { return newTestStore(t, client) })
}

// numSub returns how many subscriptions s's channel has, over every node.
func numSub(t *testing.T, s *Store) int64 {
	t.Helper()
	var total atomic.Int64
	count := func(ctx context.Context, c *redis.Client) error {
		subs, err := c.PubSubNumSub(ctx, s.Channel()).Result()
		total.Add(subs[s.Channel()])
		return err
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(t.Context(), count)
	case *redis.Client:
		err = count(t.Context(), c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return total.Load()
}

// Release of a record that is not there (never claimed, already
// released, deleted) returns ErrLeaseLost.
func TestReleaseMissing(t *testing.T) {
	s := newTestStore(t, testClient(t))
	ctx := t.Context()
	now := time.Now()
	c := store.Claim{Scope: "scope", Key: "k", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)}
	if err := s.Release(ctx, holdOf(c.Scope, "never", c.Token)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release of a key never claimed = %v", err)
	}
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if err := s.Release(ctx, holdOf(c.Scope, c.Key, c.Token)); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, holdOf(c.Scope, c.Key, c.Token)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("second release = %v", err)
	}
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if ok, err := s.Delete(ctx, refOf(c.Scope, c.Key)); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := s.Release(ctx, holdOf(c.Scope, c.Key, c.Token)); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release after delete = %v", err)
	}
}

// A record in Redis that this package cannot have written is refused with
// ErrCorruptRecord by Claim (both paths) and Get, and the engine answers
// 503 instead of replaying it; so it does for a record the Store reads
// but whose Head the engine cannot (a legacy status out of range, a Head
// in no format the engine knows).
func TestCorruptRecord(t *testing.T) {
	client := testClient(t)
	s := newTestStore(t, client)
	ctx := t.Context()
	now := time.Now()
	base := store.Record{Fingerprint: "fp", State: store.Completed, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	good := encodeRecord(t, store.Record{
		Fingerprint: "fp", State: store.Completed, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
		Result: store.Result{Head: []byte("h")},
	}, "")
	prefix := string(recordPrefix(t, base, ""))
	for name, v := range map[string]string{
		"state 3":           "3" + good[1:],
		"empty head":        prefix + "\x02\x00\x00",
		"format 3":          prefix + "\x03\x00\x01h",
		"legacy status 0":   encodeLegacyRecord(t, base, "", legacyResponse{Status: 0}),
		"legacy status 101": encodeLegacyRecord(t, base, "", legacyResponse{Status: 101}),
		"garbage":           "not a record at all, but long enough to have a header of sixty-six bytes",
	} {
		t.Run(name, func(t *testing.T) {
			if err := client.Set(ctx, s.Key("scope", name), v, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			for _, script := range []bool{false, true} {
				s.scriptClaims = script
				_, err := s.Claim(ctx, store.Claim{Scope: "scope", Key: name, Fingerprint: "fp", Token: "t", Now: now, LeaseEnd: now.Add(time.Minute)})
				if !errors.Is(err, store.ErrCorruptRecord) {
					t.Errorf("Claim (script %v) = %v, want ErrCorruptRecord", script, err)
				}
			}
			s.scriptClaims = false
			if _, _, err := s.Get(ctx, refOf("scope", name), now); !errors.Is(err, store.ErrCorruptRecord) {
				t.Errorf("Get = %v, want ErrCorruptRecord", err)
			}
		})
	}

	e, err := idem.New(s, idem.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusCreated)
	}))
	post := func() int {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "engine")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := post(); code != http.StatusCreated {
		t.Fatalf("first request: %d", code)
	}
	key, v := completedRecord(ctx, t, s, client.Keys(ctx, s.prefix+"{*").Val())
	rec, err := decodeRecord(v)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(v[offTokLen:offToken])
	token := v[offToken : offToken+n]
	// Each changed record: the Store reads it, the engine refuses it.
	for name, bad := range map[string]string{
		"legacy status 700": encodeLegacyRecord(t, rec, token, legacyResponse{Status: 700}),
		"legacy status 199": encodeLegacyRecord(t, rec, token, legacyResponse{Status: 199, Body: []byte{}}),
		"legacy bad header": encodeLegacyRecord(t, rec, token, legacyResponse{Status: 201, Header: []byte{1, 1, 5, 'a'}}),
		"head format 0x7f": encodeRecord(t, store.Record{
			Fingerprint: rec.Fingerprint, State: store.Completed, CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt,
			Result: store.Result{Head: []byte{0x7f, 0, 1, 2}},
		}, token),
	} {
		if err := client.Set(ctx, key, bad, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := decodeRecord(bad); err != nil {
			t.Fatalf("%s: the Store refuses the record: %v", name, err)
		}
		if code := post(); code != http.StatusServiceUnavailable {
			t.Errorf("%s: retry with a corrupt record: %d, want 503", name, code)
		}
	}
	if runs != 1 {
		t.Fatalf("handler ran %d times", runs)
	}
}
