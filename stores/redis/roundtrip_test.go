package redisstore

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

// countHook counts the round trips a client makes: one per command, one
// per pipeline.
type countHook struct {
	mu    sync.Mutex
	trips int
	names []string
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.trips++
		h.names = append(h.names, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.trips++
		for _, c := range cmds {
			h.names = append(h.names, "pipeline:"+c.Name())
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *countHook) take() (int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, names := h.trips, h.names
	h.trips, h.names = 0, nil
	return n, names
}

// warmUp runs every script once on a throw-away key, so the server has
// them cached and later calls go by EVALSHA alone.
func warmUp(t testing.TB, s *Store) {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	c := store.Claim{Scope: "warm-up", Key: "k", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)}
	steps := []error{
		func() error { _, err := s.Claim(ctx, c); return err }(),
		s.Extend(ctx, holdOf("warm-up", "k", "tok"), now, now.Add(time.Minute)),
		s.Release(ctx, holdOf("warm-up", "k", "tok")),
		func() error { _, err := s.Claim(ctx, c); return err }(),
		s.Complete(ctx, holdOf("warm-up", "k", "tok"), completion(store.Result{Head: httpHead(200, nil)}, now, now.Add(time.Minute))),
		s.Evict(ctx, holdOf("warm-up", "k", "tok")),
		func() error { _, err := s.Claim(ctx, c); return err }(),
		func() error { _, err := s.Delete(ctx, refOf("warm-up", "k")); return err }(),
		func() error { _, err := s.Now(ctx); return err }(),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("warm-up step %d: %v", i, err)
		}
	}
}

// TestRoundTrips fails when a step of a request costs more than one round
// trip to Redis: claim 1, complete 1, release 1, replay 1 (and extend, get
// and delete 1 each). It also pins the command each step uses.
func TestRoundTrips(t *testing.T) {
	client := testClient(t)
	hook := &countHook{}
	client.AddHook(hook)
	s := newTestStore(t, client)
	warmUp(t, s)
	hook.take()

	ctx := t.Context()
	now := time.Now()
	resp := store.Result{Head: httpHead(201, http.Header{"Content-Type": {"application/json"}}), Body: []byte(`{"id":1}`)}
	claim := func(key, token string) store.ClaimResult {
		res, err := s.Claim(ctx, store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: token, Now: now, LeaseEnd: now.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	steps := []struct {
		name string
		want []string // commands, one round trip each
		do   func()
	}{
		{"claim", []string{"set"}, func() {
			if !claim("a", "tok").Acquired {
				t.Fatal("not acquired")
			}
		}},
		{"extend", []string{"evalsha"}, func() {
			if err := s.Extend(ctx, holdOf("s", "a", "tok"), now, now.Add(2*time.Minute)); err != nil {
				t.Fatal(err)
			}
		}},
		{"complete", []string{"evalsha"}, func() {
			if err := s.Complete(ctx, holdOf("s", "a", "tok"), completion(resp, now, now.Add(time.Hour))); err != nil {
				t.Fatal(err)
			}
		}},
		{"replay claim", []string{"set"}, func() {
			if res := claim("a", "tok2"); res.Existing == nil || len(res.Existing.Result.Head) == 0 {
				t.Fatal("no replay")
			}
		}},
		{"conflict claim", []string{"set"}, func() {
			claim("b", "tok")
			hook.take()
			if res := claim("b", "tok2"); res.Existing == nil {
				t.Fatal("no conflict")
			}
		}},
		{"release", []string{"evalsha"}, func() {
			if err := s.Release(ctx, holdOf("s", "b", "tok")); err != nil {
				t.Fatal(err)
			}
		}},
		{"get", []string{"get"}, func() {
			if _, ok, err := s.Get(ctx, refOf("s", "a"), now); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}},
		{"delete", []string{"evalsha"}, func() {
			if ok, err := s.Delete(ctx, refOf("s", "a")); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}},
		{"evict", []string{"evalsha"}, func() {
			claim("d", "tok")
			hook.take()
			if err := s.Evict(ctx, holdOf("s", "d", "tok")); err != nil {
				t.Fatal(err)
			}
		}},
		{"clock", []string{"evalsha"}, func() {
			if _, err := s.Now(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		// The one step allowed a second round trip: taking over a record
		// that has ended by the engine's clock while Redis, by its own
		// clock, still holds it (clock skew, or here a clock moved ahead).
		{"takeover claim", []string{"set", "evalsha"}, func() {
			claim("c", "tok")
			hook.take()
			later := now.Add(time.Hour)
			res, err := s.Claim(ctx, store.Claim{Scope: "s", Key: "c", Fingerprint: "fp", Token: "tok2", Now: later, LeaseEnd: later.Add(time.Minute)})
			if err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
		}},
	}
	for _, step := range steps {
		step.do()
		n, names := hook.take()
		if n != len(step.want) || !slices.Equal(names, step.want) {
			t.Errorf("%s: %d round trips %v, want %d %v", step.name, n, names, len(step.want), step.want)
		}
	}
}

// TestRecordsInRedis checks what a record looks like in Redis: one string
// under a hash-tagged key, byte for byte what was stored, with a TTL that
// follows its lifetime, gone by itself once it ends.
func TestRecordsInRedis(t *testing.T) {
	client := testClient(t)
	s := newTestStore(t, client)
	ctx := t.Context()

	// Scopes and keys are opaque bytes to the store.
	scope := "ns\x00{x}\xff:" + strings.Repeat("é", 10)
	key := "key}{\x01"
	k := s.Key(scope, key)
	if !regexp.MustCompile(`^` + regexp.QuoteMeta(s.prefix) + `\{[0-9a-f]{32}\}$`).MatchString(k) {
		t.Fatalf("record key %q, want prefix + {32 hex digits}", k)
	}

	// An in-progress record stays in Redis until LeaseEnd + (LeaseEnd -
	// CreatedAt), for a late Complete: twice its lease when claimed, and
	// after an Extend at created+e to a lease end created+e+l, e+2l from
	// now. So does a claim that takes an ended record over (the script).
	now := time.Now()
	lease := 5 * time.Minute
	if res, err := s.Claim(ctx, store.Claim{Scope: scope, Key: key, Fingerprint: "fp\x00\xff", Token: "tok", Now: now, LeaseEnd: now.Add(lease)}); err != nil || !res.Acquired {
		t.Fatalf("Claim: %+v, %v", res, err)
	}
	checkPTTL(t, client, k, 2*lease)
	if err := s.Extend(ctx, holdOf(scope, key, "tok"), now, now.Add(2*lease)); err != nil {
		t.Fatal(err)
	}
	checkPTTL(t, client, k, 4*lease)
	if err := s.Extend(ctx, holdOf(scope, key, "tok"), now.Add(-lease), now.Add(lease)); err != nil {
		t.Fatal(err)
	}
	checkPTTL(t, client, k, 3*lease)
	later := now.Add(time.Hour)
	if res, err := s.Claim(ctx, store.Claim{Scope: scope, Key: "taken-over", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(lease)}); err != nil || !res.Acquired {
		t.Fatalf("Claim: %+v, %v", res, err)
	}
	if res, err := s.Claim(ctx, store.Claim{Scope: scope, Key: "taken-over", Fingerprint: "fp", Token: "tok2", Now: later, LeaseEnd: later.Add(lease)}); err != nil || !res.Acquired {
		t.Fatalf("takeover Claim: %+v, %v", res, err)
	}
	checkPTTL(t, client, s.Key(scope, "taken-over"), 2*lease)

	body := make([]byte, 0, 512)
	for i := range 512 {
		body = append(body, byte(i))
	}
	resp := store.Result{
		Head: httpHead(200, http.Header{
			"Content-Type":   {"application/octet-stream"},
			"X-Multi":        {"z", "a", "", "a"},
			"X-Binary":       {"\x00\xff\xfe", "caf\xe9"},
			"X-No-Values":    {},
			"x-odd-name\x00": {"v"},
		}),
		Body: body,
	}
	retention := 24 * time.Hour
	if err := s.Complete(ctx, holdOf(scope, key, "tok"), completion(resp, now, now.Add(retention))); err != nil {
		t.Fatal(err)
	}
	checkPTTL(t, client, k, retention)
	raw, err := client.Get(ctx, k).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if raw[0] != '2' || !bytes.Contains(raw, body) || !bytes.Contains(raw[offToken:], []byte("tok")) {
		t.Errorf("completed record %q: want state 2, the body, and the token", raw[:min(len(raw), 100)])
	}
	res, err := s.Claim(ctx, store.Claim{Scope: scope, Key: key, Fingerprint: "fp", Token: "tok2", Now: now, LeaseEnd: now.Add(lease)})
	if err != nil || res.Existing == nil {
		t.Fatalf("replay Claim: %+v, %v", res, err)
	}
	checkRecord(t, *res.Existing, store.Record{Fingerprint: "fp\x00\xff", State: store.Completed, Result: resp, CreatedAt: now, ExpiresAt: now.Add(retention)})

	// Any head, an empty or no body, and BodyOmitted come back.
	for i, r := range []store.Result{
		{Head: []byte{1}},
		{Head: []byte{0}, Body: []byte{}},
		{Head: []byte{0xff, 0, 0xc8, 1}, Body: []byte{0}},
		{Head: httpHead(200, http.Header{"X-Size": {"9999999"}}), BodyOmitted: true},
		{Head: bytes.Repeat([]byte{0x80}, store.MaxHead), Body: body},
	} {
		key := "variant-" + string(rune('a'+i))
		if _, err := s.Claim(ctx, store.Claim{Scope: scope, Key: key, Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(lease)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, holdOf(scope, key, "tok"), completion(r, now, now.Add(retention))); err != nil {
			t.Fatal(err)
		}
		rec, ok, err := s.Get(ctx, refOf(scope, key), now)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		checkRecord(t, rec, store.Record{Fingerprint: "fp", State: store.Completed, Result: r, CreatedAt: now, ExpiresAt: now.Add(retention)})
	}

	// Records leave Redis by themselves: an abandoned claim a lease after
	// its lease end, a completed record at its expiry.
	now = time.Now()
	if _, err := s.Claim(ctx, store.Claim{Scope: "s", Key: "abandoned", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(100 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, store.Claim{Scope: "s", Key: "short", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, holdOf("s", "short", "tok"), completion(resp, now, now.Add(150*time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		n, err := client.Exists(ctx, s.Key("s", "abandoned"), s.Key("s", "short")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 records still in Redis 3s after their expiry", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkPTTL checks that key's TTL in Redis is set and within a second
// below want.
func checkPTTL(t *testing.T, client redis.UniversalClient, key string, want time.Duration) {
	t.Helper()
	got, err := client.PTTL(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got > want || got < want-time.Second {
		t.Errorf("PTTL %s = %v, want just under %v", key, got, want)
	}
}

// Lifetimes longer than the longest time.Duration (times further apart
// than about 292 years) get the longest TTL instead of an overflowed one of
// a millisecond, on both the claim's fast path and the scripts.
func TestHugeLifetime(t *testing.T) {
	client := testClient(t)
	for _, script := range []bool{false, true} {
		s := newTestStore(t, client)
		s.scriptClaims = script
		ctx := t.Context()
		now := time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)
		end := time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
		if res, err := s.Claim(ctx, store.Claim{Scope: "s", Key: "k", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: end}); err != nil || !res.Acquired {
			t.Fatalf("Claim: %+v, %v", res, err)
		}
		check := func(step string) {
			t.Helper()
			ttl, err := client.PTTL(ctx, s.Key("s", "k")).Result()
			if err != nil || ttl < 290*365*24*time.Hour {
				t.Fatalf("%s (script claims %v): PTTL = %v, %v; want about 292 years", step, script, ttl, err)
			}
		}
		check("Claim")
		if err := s.Extend(ctx, holdOf("s", "k", "tok"), now, end.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		check("Extend")
		if err := s.Complete(ctx, holdOf("s", "k", "tok"), completion(store.Result{Head: httpHead(200, nil)}, now, end)); err != nil {
			t.Fatal(err)
		}
		check("Complete")
		if rec, ok, err := s.Get(ctx, refOf("s", "k"), now); err != nil || !ok || !rec.ExpiresAt.Equal(end) {
			t.Fatalf("Get: %+v %v %v", rec, ok, err)
		}
	}
}
