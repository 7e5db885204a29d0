package redisstore

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

// replyDropper is a TCP proxy to a Redis server that, when armed, cuts
// the connection that carries the reply to the next request it matches,
// instead of forwarding that reply: the command reached the server and
// was applied, and the client sees its connection reset before the
// answer, as when a network path fails between a write and its reply.
// go-redis then sends the command again on a new connection (its own
// retry).
type replyDropper struct {
	ln      net.Listener
	dropped atomic.Int32

	mu    sync.Mutex
	match func(request []byte) bool // nil when not armed
	conns []net.Conn
}

// newReplyDropper starts a replyDropper to target on a free loopback
// port; it and its connections are closed when the test ends.
func newReplyDropper(t testing.TB, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyDropper{ln: ln}
	t.Cleanup(p.close)
	go p.accept(target)
	return p
}

func (p *replyDropper) addr() string { return p.ln.Addr().String() }

// arm makes the proxy drop the reply to the next request, as the client
// writes it, for which match is true, and resets the count of drops.
func (p *replyDropper) arm(match func(request []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match = match
	p.dropped.Store(0)
}

// sending returns the request with all of its words, in any case.
func sending(words ...string) func([]byte) bool {
	return func(request []byte) bool {
		for _, w := range words {
			if !bytes.Contains(bytes.ToLower(request), bytes.ToLower([]byte(w))) {
				return false
			}
		}
		return true
	}
}

func (p *replyDropper) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *replyDropper) accept(target string) {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		var drop atomic.Bool // the next reply on this connection
		go p.requests(client, server, &drop)
		go p.replies(client, server, &drop)
	}
}

// requests forwards the client's requests to the server, and marks the
// connection's next reply to be dropped after the one armed for.
func (p *replyDropper) requests(client, server net.Conn, drop *atomic.Bool) {
	defer server.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if p.match != nil && p.match(buf[:n]) {
				p.match = nil
				drop.Store(true)
			}
			p.mu.Unlock()
			if _, err := server.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// replies forwards the server's replies to the client, but cuts both
// connections instead of forwarding one marked to be dropped.
func (p *replyDropper) replies(client, server net.Conn, drop *atomic.Bool) {
	defer client.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if drop.Load() {
				p.dropped.Add(1)
				_ = server.Close()
				return
			}
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestClaimReplyLost checks a claim whose reply is lost after Redis
// applied it, and which go-redis sends again by itself: the second
// attempt finds the record its first one wrote, holding the claim's own
// token, and the claim is acquired, not blocked by itself (which would
// make the engine answer 409 and leave the key blocked for the whole
// lease, with nobody to release it). Both paths are covered: the SET NX
// GET, the claim script, and the script's take-over of an ended record.
// The claim is then held: Release with its token deletes the record.
func TestClaimReplyLost(t *testing.T) {
	direct := testClient(t)
	p := newReplyDropper(t, direct.Options().Addr)
	client := redis.NewClient(&redis.Options{Addr: p.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s := newTestStore(t, client)
	ctx := t.Context()
	now := time.Now()
	// Loaded beforehand, so that the reply dropped is the script's
	// result, not a NOSCRIPT error.
	if err := claimScript.Load(ctx, direct).Err(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		script   bool
		takeover bool // an ended claim of another token holds the key
	}{
		{name: "set", script: false},
		{name: "script", script: true},
		{name: "takeover", script: true, takeover: true},
		{name: "takeover by set then script", script: false, takeover: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.scriptClaims = tc.script
			t.Cleanup(func() { s.scriptClaims = false })
			if tc.takeover {
				old := store.Claim{Scope: "s", Key: tc.name, Fingerprint: "fp", Token: "old", Now: now.Add(-time.Minute), LeaseEnd: now.Add(-time.Second)}
				rec, err := newClaimRecord(&old)
				if err != nil {
					t.Fatal(err)
				}
				if err := direct.Set(ctx, s.Key("s", tc.name), rec, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			c := store.Claim{Scope: "s", Key: tc.name, Fingerprint: "fp", Token: "tok-" + tc.name, Now: now, LeaseEnd: now.Add(15 * time.Second)}
			// On the SET path with an ended claim there, the SET NX GET
			// finds that claim and the claim script takes the key over:
			// the script's reply is the one dropped.
			first := map[bool]string{false: "set", true: "evalsha"}[tc.script || tc.takeover]
			p.arm(sending(first, s.Key("s", tc.name)))
			res, err := s.Claim(ctx, c)
			if p.dropped.Load() != 1 {
				t.Fatalf("the proxy dropped %d replies, want 1: the fault did not happen", p.dropped.Load())
			}
			if err != nil {
				t.Fatalf("claim after a lost reply: %v", err)
			}
			if !res.Acquired {
				t.Fatalf("claim after a lost reply: blocked by its own record %+v; want acquired", *res.Existing)
			}
			if err := s.Release(ctx, c.Hold()); err != nil {
				t.Fatalf("release of the claim: %v", err)
			}
			if n := direct.Exists(ctx, s.Key("s", tc.name)).Val(); n != 0 {
				t.Fatalf("the record is still there after its release")
			}
		})
	}

	// A claim whose record holds another token is still blocked by it.
	other := store.Claim{Scope: "s", Key: "other", Fingerprint: "fp", Token: "first", Now: now, LeaseEnd: now.Add(15 * time.Second)}
	if res, err := s.Claim(ctx, other); err != nil || !res.Acquired {
		t.Fatalf("first claim: %+v, %v", res, err)
	}
	for _, script := range []bool{false, true} {
		s.scriptClaims = script
		second := other
		second.Token = "second"
		res, err := s.Claim(ctx, second)
		if err != nil || res.Acquired || res.Existing == nil || res.Existing.State != store.InProgress {
			t.Fatalf("a claim of another token (script %v): %+v, %v; want blocked by the first", script, res, err)
		}
	}
	s.scriptClaims = false
}

// TestClaimReplyLostReplicas is TestClaimReplyLost under WithReplicas.
// The second attempt's WAIT would count nothing (its connection wrote
// nothing), so a claim that finds its own record writes it again before
// the WAIT: with the replica acknowledging the claim is acquired, and
// with the replica stopped it fails with ErrNotReplicated, as the first
// attempt would have.
func TestClaimReplyLostReplicas(t *testing.T) {
	rs := startReplicated(t)
	p := newReplyDropper(t, rs.primary.addr())
	client := redis.NewClient(&redis.Options{Addr: p.addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s := newTestStore(t, client, noFailover, WithReplicas(1, replicaWait))
	ctx := t.Context()
	now := time.Now()
	if err := claimScript.Load(ctx, rs.client).Err(); err != nil {
		t.Fatal(err)
	}
	claim := func(key string) (store.Claim, store.ClaimResult, error) {
		t.Helper()
		c := store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: "tok-" + key, Now: now, LeaseEnd: now.Add(15 * time.Second)}
		p.arm(sending(s.Key("s", key)))
		res, err := s.Claim(ctx, c)
		if p.dropped.Load() != 1 {
			t.Fatalf("the proxy dropped %d replies, want 1: the fault did not happen", p.dropped.Load())
		}
		return c, res, err
	}

	for _, script := range []bool{false, true} {
		s.scriptClaims = script
		key := map[bool]string{false: "set", true: "script"}[script]
		c, res, err := claim(key)
		if err != nil || !res.Acquired {
			t.Fatalf("%s: claim after a lost reply: %+v, %v; want acquired", key, res, err)
		}
		want, err := newClaimRecord(&c)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := rs.replicaClient.Get(ctx, s.Key("s", key)).Result(); err != nil || v != want {
			t.Fatalf("%s: the acquired claim is not on the replica: %q, %v", key, v, err)
		}
	}
	s.scriptClaims = false

	rs.replica.freeze()
	_, res, err := claim("frozen")
	if !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("claim after a lost reply, the replica stopped: %+v, %v; want ErrNotReplicated", res, err)
	}
}
