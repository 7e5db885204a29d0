package redisstore

import (
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

func closedNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Watch does not wait for the subscription: with Redis unreachable it
// returns at once, and the watch is woken when the subscription is
// confirmed. No server needed.
func TestWatchDoesNotBlock(t *testing.T) {
	s, err := New(offlineClient(t), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var chans []<-chan struct{}
	for i := range 3 {
		start := time.Now()
		ch, stop, err := s.Watch(t.Context(), refOf("scope", "k"))
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("Watch %d with the subscription down took %v", i, d)
		}
		chans = append(chans, ch)
		time.Sleep(100 * time.Millisecond) // failed subscription attempts meanwhile
	}
	for i, ch := range chans {
		if closedNow(ch) {
			t.Fatalf("watch %d woken while the subscription never came up", i)
		}
	}
	// The subscription comes up: every watch taken while it was down is
	// woken, as a notification may have been missed.
	s.hub.markUp()
	for i, ch := range chans {
		if !closedNow(ch) {
			t.Fatalf("watch %d not woken when the subscription came up", i)
		}
	}
}

// The subscription breaks while Redis stays up for others: a watch taken
// meanwhile returns at once, a completion published meanwhile is missed by
// the subscription, and the watch is woken when the subscription is back.
func TestWatchWhileSubscriptionDown(t *testing.T) {
	direct := testClient(t)
	px := conformance.NewProxy(t, direct.Options().Addr)
	proxied := redis.NewClient(&redis.Options{Addr: px.Addr(), DB: direct.Options().DB, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = proxied.Close() })
	s := newTestStore(t, proxied)
	other, err := New(direct, WithPrefix(s.prefix)) // another instance, still connected
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx := t.Context()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for range 500 {
			if cond() {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("timed out waiting until %s", what)
	}

	_, stop, err := s.Watch(ctx, refOf("scope", "warm-up"))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	waitFor("the subscription is up", s.hub.up)
	now := time.Now()
	if res, err := other.Claim(ctx, store.Claim{Scope: "scope", Key: "k", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)}); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	up, stopUp, err := s.Watch(ctx, refOf("scope", "k"))
	if err != nil {
		t.Fatal(err)
	}
	defer stopUp()

	px.Set(conformance.ProxyDown)
	select {
	case <-up:
	case <-time.After(5 * time.Second):
		t.Fatal("a pending watch was not woken when the subscription broke")
	}
	waitFor("the subscription is down", func() bool { return !s.hub.up() })

	start := time.Now()
	ch, stop, err := s.Watch(ctx, refOf("scope", "k"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("Watch with the subscription down took %v", d)
	}
	if err := other.Release(ctx, holdOf("scope", "k", "tok")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if closedNow(ch) {
		t.Fatal("woken while the subscription is down")
	}
	px.Set(conformance.ProxyUp)
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("a watch taken while the subscription was down was not woken when it came back")
	}
	if !s.hub.up() {
		t.Fatal("woken, but the subscription is not up")
	}
}
