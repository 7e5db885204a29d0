package memstore

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
)

// checkStore checks that every entry is in the map and in the heap of its
// state at its position, every in-progress one in lingering too, that the
// heaps are ordered, and that the store holds at most max entries. s.mu
// must not be held.
func checkStore(t *testing.T, s *Store, step int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if got, want := len(s.running.es)+len(s.done.es), len(s.entries); got != want {
		t.Fatalf("step %d: the heaps hold %d entries, the map %d", step, got, want)
	}
	if got, want := len(s.lingering.es), len(s.running.es); got != want {
		t.Fatalf("step %d: lingering holds %d entries, running %d", step, got, want)
	}
	if s.max > 0 && len(s.entries) > s.max {
		t.Fatalf("step %d: %d entries, more than the limit %d", step, len(s.entries), s.max)
	}
	for name, h := range map[string]*expiryHeap{"running": &s.running, "done": &s.done, "lingering": &s.lingering} {
		for i, e := range h.es {
			if *h.pos(e) != i {
				t.Fatalf("step %d: %s[%d] has position %d", step, name, i, *h.pos(e))
			}
			if s.entries[e.k] != e {
				t.Fatalf("step %d: %s[%d] (%q) is not the map's entry", step, name, i, e.k.Key)
			}
			if got := s.heapOf(e); name != "lingering" && (len(got.es) <= i || got.es[i] != e) {
				t.Fatalf("step %d: %q (state %v) is in the %s heap", step, e.k.Key, e.State, name)
			}
			if name == "lingering" && e.State != store.InProgress {
				t.Fatalf("step %d: completed %q is in lingering", step, e.k.Key)
			}
			if e.State == store.InProgress && !e.ExpiresAt.Equal(e.LeaseEnd) {
				t.Fatalf("step %d: in-progress %q expires at %v, its lease ends at %v", step, e.k.Key, e.ExpiresAt, e.LeaseEnd)
			}
			if i > 0 && h.less(i, (i-1)/2) {
				t.Fatalf("step %d: %s[%d] comes before its parent", step, name, i)
			}
		}
	}
}

// snapshot copies the store's entries.
func snapshot(s *Store) map[store.Ref]entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[store.Ref]entry, len(s.entries))
	for k, e := range s.entries {
		m[k] = *e
	}
	return m
}

// hold names the claim of key in scope "s" with token.
func hold(key, token string) store.Hold {
	return store.Hold{Ref: store.Ref{Scope: "s", Key: key}, Token: token}
}

// randomMax is the size limit of the store TestRandomOperations drives.
const randomMax = 8

// TestRandomOperations runs random operations on a small store and checks
// its structure after each one, and every claim on a new key against a
// brute-force model of eviction: the record that expired first, else the
// completed record closest to expiry, never a live claim, else ErrFull.
func TestRandomOperations(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	s := New(WithMaxEntries(randomMax), WithSweepInterval(0))
	now := time.Unix(1_700_000_000, 0)
	tokens := map[string]string{} // the last token that claimed each key
	randKey := func() string { return "k" + strconv.Itoa(r.IntN(20)) }
	randToken := func(key string) string {
		if r.IntN(5) == 0 {
			return "wrong"
		}
		return tokens[key]
	}
	minutes := func(lo, hi int) time.Duration { return time.Duration(lo*60+r.IntN((hi-lo)*60)) * time.Second }
	for step := range 20000 {
		now = now.Add(time.Duration(r.IntN(20)) * time.Second)
		key := randKey()
		switch op := r.IntN(10); {
		case op < 4:
			before := snapshot(s)
			token := "t" + strconv.Itoa(step)
			res, err := s.Claim(ctx, store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: token, Now: now, LeaseEnd: now.Add(minutes(1, 5))})
			after := snapshot(s)
			if res.Acquired {
				tokens[key] = token
			}
			checkClaim(t, step, key, now, before, after, res, err)
		case op < 6:
			res := store.Result{Head: []byte{1, 200}}
			_ = s.Complete(ctx, hold(key, randToken(key)), store.Completion{Result: res, Now: now, ExpiresAt: now.Add(minutes(1, 15))})
		case op < 7:
			_ = s.Extend(ctx, hold(key, randToken(key)), now, now.Add(minutes(1, 5)))
		case op < 8:
			_ = s.Release(ctx, hold(key, randToken(key)))
		case op < 9:
			if r.IntN(4) == 0 {
				_, _ = s.Delete(ctx, store.Ref{Scope: "s", Key: key})
			}
		default:
			if r.IntN(4) == 0 {
				before := snapshot(s)
				n, _ := s.DeleteExpired(ctx, now)
				after := snapshot(s)
				for k, e := range before {
					_, kept := after[k]
					if expired := !now.Before(e.gone); kept == expired {
						t.Fatalf("step %d: DeleteExpired: %q (removable from %v, now %v) kept = %t", step, k.Key, e.gone, now, kept)
					}
				}
				if n != len(before)-len(after) {
					t.Fatalf("step %d: DeleteExpired = %d, removed %d", step, n, len(before)-len(after))
				}
			}
		}
		checkStore(t, s, step)
	}
}

// checkClaim checks a claim on key at now against the model, from the
// store's entries before and after it.
func checkClaim(t *testing.T, step int, key string, now time.Time, before, after map[store.Ref]entry, res store.ClaimResult, err error) {
	t.Helper()
	k := store.Ref{Scope: "s", Key: key}
	old, had := before[k]
	if had {
		// An existing key never evicts anything.
		if err != nil || res.Acquired == !old.Takeable(now) || len(after) != len(before) {
			t.Fatalf("step %d: claim on existing %q: %+v, %v; %d entries before, %d after", step, key, res, err, len(before), len(after))
		}
		return
	}
	// The model's victim when the store is full.
	var victim *entry
	var expired, completed []entry
	for _, e := range before {
		if !now.Before(e.ExpiresAt) {
			expired = append(expired, e)
		} else if e.State == store.Completed {
			completed = append(completed, e)
		}
	}
	earliest := func(es []entry) *entry {
		var m *entry
		for i := range es {
			if m == nil || es[i].ExpiresAt.Before(m.ExpiresAt) {
				m = &es[i]
			}
		}
		return m
	}
	if victim = earliest(expired); victim == nil {
		victim = earliest(completed)
	}
	full := len(before) >= randomMax
	if full && victim == nil {
		if !errors.Is(err, ErrFull) || res.Acquired || len(after) != len(before) {
			t.Fatalf("step %d: claim on %q with only live claims held: %+v, %v; want ErrFull", step, key, res, err)
		}
		return
	}
	if err != nil || !res.Acquired {
		t.Fatalf("step %d: claim on new %q: %+v, %v; want acquired", step, key, res, err)
	}
	var gone []entry
	for k, e := range before {
		if _, ok := after[k]; !ok {
			gone = append(gone, e)
		}
	}
	switch {
	case !full && len(gone) != 0:
		t.Fatalf("step %d: a claim on a store with room evicted %d records", step, len(gone))
	case full && len(gone) != 1:
		t.Fatalf("step %d: a claim on a full store evicted %d records, want 1", step, len(gone))
	case full:
		g := gone[0]
		if g.State == store.InProgress && now.Before(g.LeaseEnd) {
			t.Fatalf("step %d: evicted the live claim %q (lease ends %v, now %v)", step, g.k.Key, g.LeaseEnd, now)
		}
		// Ties on expiresAt may go either way.
		if !g.ExpiresAt.Equal(victim.ExpiresAt) || (now.Before(g.ExpiresAt) != now.Before(victim.ExpiresAt)) {
			t.Fatalf("step %d: evicted %q (%v, expires %v), want %q (%v, expires %v) at %v",
				step, g.k.Key, g.State, g.ExpiresAt, victim.k.Key, victim.State, victim.ExpiresAt, now)
		}
	}
}

// TestStoredResultCopies: the stored result is the store's own copy, in
// one allocation when small and in two past oneAlloc, and growing its Head
// (a caller appending to what it got back) never reaches its Body.
func TestStoredResultCopies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   int
		allocs float64
	}{
		{"small", 1 << 10, 1},
		{"empty body", 0, 1},
		{"past oneAlloc", oneAlloc, 2},
	} {
		in := store.Result{Head: []byte("\x01head"), Body: bytes.Repeat([]byte("b"), tc.body)}
		var out store.Result
		if n := testing.AllocsPerRun(20, func() { out = storedResult(&in) }); n != tc.allocs {
			t.Errorf("%s: %v allocations, want %v", tc.name, n, tc.allocs)
		}
		if tc.body == 0 && out.Body != nil {
			t.Errorf("%s: an empty body is kept as %q, want nil", tc.name, out.Body)
		}
		in.Head[1], in.Body = 'X', nil // the caller reuses its memory
		grown := append(out.Head, "more"...)
		if string(out.Head) != "\x01head" || string(grown) != "\x01headmore" || len(out.Body) != tc.body || bytes.ContainsRune(out.Body, 'm') {
			t.Errorf("%s: head %q, body of %d bytes after the caller changed its own and grew the head", tc.name, out.Head, len(out.Body))
		}
	}
}
