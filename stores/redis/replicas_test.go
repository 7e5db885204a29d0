package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

// replicated is a private primary with one replica, both on loopback.
type replicated struct {
	primary, replica *server
	client           *redis.Client // to the primary
	replicaClient    *redis.Client
}

// startReplicated starts a primary and a replica of it, and waits until
// the replica is in sync. Everything is torn down when the test ends.
func startReplicated(t testing.TB) *replicated {
	t.Helper()
	// The primary sends its first snapshot at once instead of waiting 5 s
	// for more replicas to join the transfer (repl-diskless-sync-delay).
	p := startServer(t, "--repl-diskless-sync-delay", "0")
	r := startServer(t, "--replicaof", "127.0.0.1", fmt.Sprint(p.port))
	rs := &replicated{
		primary: p, replica: r,
		client:        redis.NewClient(&redis.Options{Addr: p.addr(), ContextTimeoutEnabled: true}),
		replicaClient: redis.NewClient(&redis.Options{Addr: r.addr(), ContextTimeoutEnabled: true}),
	}
	t.Cleanup(func() { _ = rs.client.Close(); _ = rs.replicaClient.Close() })
	waitInSync(t, rs.client, 1)
	return rs
}

// waitInSync waits until the server behind c has n replicas that
// acknowledge a write.
func waitInSync(t testing.TB, c *redis.Client, n int) {
	t.Helper()
	if err := inSync(c, n, "idemtest:sync-probe"); err != nil {
		t.Fatal(err)
	}
}

// inSync waits up to 10 s until the server behind c has n replicas that
// acknowledge a write of key, which c must own. (A WAIT after no write counts a replica that has
// just loaded its first snapshot, whose stream starts only with its
// first acknowledgement, up to a second later.)
func inSync(c *redis.Client, n int, key string) error {
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pipe := c.Pipeline()
		pipe.Set(ctx, key, "1", time.Minute)
		wait := redis.NewIntCmd(ctx, "wait", n, 100)
		_ = pipe.Process(ctx, wait)
		_, err := pipe.Exec(ctx)
		if got := wait.Val(); err == nil && got >= int64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d replicas in sync after 10s: %v", c.Options().Addr, wait.Val(), n, err)
		}
	}
}

// freeze stops the server's process (SIGSTOP): it neither applies nor
// acknowledges the replication stream until thaw. thaw runs at the end
// of the test too.
func (s *server) freeze() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(s.thaw)
}

func (s *server) thaw() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

const replicaWait = 200 * time.Millisecond

// noFailover tells New that nothing fails the test's primary over to its
// replica, which New would otherwise warn about.
var noFailover = WithFailoverTime(0)

// TestReplicasRoundTrips is TestRoundTrips under WithReplicas: each write
// the engine counts on goes in one pipeline with its WAIT, so every step
// still costs one round trip; release, get and delete do not wait.
func TestReplicasRoundTrips(t *testing.T) {
	rs := startReplicated(t)
	hook := &countHook{}
	rs.client.AddHook(hook)
	s := newTestStore(t, rs.client, noFailover, WithReplicas(1, time.Second))
	warmUp(t, s)
	hook.take()

	ctx := t.Context()
	now := time.Now()
	resp := store.Result{Head: httpHead(201, nil), Body: []byte(`{"id":1}`)}
	claim := func(key, token string) store.ClaimResult {
		res, err := s.Claim(ctx, store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: token, Now: now, LeaseEnd: now.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	synced := func(cmd string) []string { return []string{"pipeline:" + cmd, "pipeline:wait"} }
	steps := []struct {
		name string
		want []string // one round trip
		do   func()
	}{
		{"claim", synced("set"), func() {
			if !claim("a", "tok").Acquired {
				t.Fatal("not acquired")
			}
		}},
		{"extend", synced("evalsha"), func() {
			if err := s.Extend(ctx, holdOf("s", "a", "tok"), now, now.Add(2*time.Minute)); err != nil {
				t.Fatal(err)
			}
		}},
		{"complete", synced("evalsha"), func() {
			if err := s.Complete(ctx, holdOf("s", "a", "tok"), completion(resp, now, now.Add(time.Hour))); err != nil {
				t.Fatal(err)
			}
		}},
		{"replay claim", synced("set"), func() {
			if res := claim("a", "tok2"); res.Existing == nil || len(res.Existing.Result.Head) == 0 {
				t.Fatal("no replay")
			}
		}},
		{"release", []string{"evalsha"}, func() {
			claim("b", "tok")
			hook.take()
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
	}
	for _, step := range steps {
		step.do()
		n, names := hook.take()
		if n != 1 || !slices.Equal(names, step.want) {
			t.Errorf("%s: %d round trips %v, want 1 %v", step.name, n, names, step.want)
		}
	}
}

// TestReplicasShortfall checks each step against a replica that stops
// acknowledging: the writes the engine counts on fail with
// ErrNotReplicated although they happened on the primary, a completed
// record keeps failing so until the replica has it, and what writes
// nothing (a replay) or does not wait (a release) goes on.
func TestReplicasShortfall(t *testing.T) {
	t.Parallel() // on servers of its own, it mostly waits
	rs := startReplicated(t)
	s := newTestStore(t, rs.client, noFailover, WithReplicas(1, replicaWait))
	ctx := t.Context()
	now := time.Now()
	resp := store.Result{Head: httpHead(201, nil), Body: []byte(`{"id":1}`)}
	claim := func(key, token string) (store.ClaimResult, error) {
		return s.Claim(ctx, store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: token, Now: now, LeaseEnd: now.Add(time.Minute)})
	}
	notReplicated := func(step string, err error) {
		t.Helper()
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("%s = %v, want ErrNotReplicated", step, err)
		}
	}
	onReplica := func(key string) (store.Record, bool) {
		t.Helper()
		v, err := rs.replicaClient.Get(ctx, s.Key("s", key)).Result()
		if errors.Is(err, redis.Nil) {
			return store.Record{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		rec, err := decodeRecord(v)
		if err != nil {
			t.Fatal(err)
		}
		return rec, true
	}

	for _, key := range []string{"done", "held", "released"} {
		if res, err := claim(key, "tok"); err != nil || !res.Acquired {
			t.Fatalf("claim %s with the replica up: %+v, %v", key, res, err)
		}
	}
	if err := s.Complete(ctx, holdOf("s", "done", "tok"), completion(resp, now, now.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if rec, ok := onReplica("held"); !ok || rec.State != store.InProgress {
		t.Fatalf("an acknowledged claim is not on the replica: %+v %v", rec, ok)
	}

	rs.replica.freeze()

	start := time.Now()
	_, err := claim("new", "tok")
	notReplicated("a new claim", err)
	if d := time.Since(start); d < replicaWait || d > replicaWait+time.Second {
		t.Errorf("the short claim took %v, want about the WAIT timeout %v", d, replicaWait)
	}
	t.Logf("claim: %v", err)
	if rec, ok, err := s.Get(ctx, refOf("s", "new"), now); err != nil || !ok || rec.State != store.InProgress {
		t.Fatalf("the unacknowledged claim is not on the primary: %+v %v %v", rec, ok, err)
	}

	// A WAIT longer than the call's deadline is cut to fit it, so the
	// caller learns why the call failed.
	long := newTestStore(t, rs.client, noFailover, WithReplicas(1, 3*time.Second))
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = long.Claim(short, store.Claim{Scope: "s", Key: "k", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)})
	cancel()
	notReplicated("a claim whose deadline is shorter than the WAIT", err)

	notReplicated("Extend", s.Extend(ctx, holdOf("s", "held", "tok"), now, now.Add(2*time.Minute)))
	err = s.Complete(ctx, holdOf("s", "held", "tok"), completion(resp, now, now.Add(time.Hour)))
	notReplicated("Complete", err)
	t.Logf("complete: %v", err)
	if rec, ok, err := s.Get(ctx, refOf("s", "held"), now); err != nil || !ok || rec.State != store.Completed {
		t.Fatalf("the unacknowledged completion is not on the primary: %+v %v %v", rec, ok, err)
	}
	// The engine's background completion tries again: the record is
	// completed, but not yet on the replica, and the Store says so.
	notReplicated("Complete again", s.Complete(ctx, holdOf("s", "held", "tok"), completion(resp, now, now.Add(time.Hour))))
	notReplicated("Extend of the completed record", s.Extend(ctx, holdOf("s", "held", "tok"), now, now.Add(2*time.Minute)))
	// So does one that reached the replica before: WAIT cannot tell, and
	// covers the expiry written again meanwhile.
	notReplicated("Complete of a record completed before", s.Complete(ctx, holdOf("s", "done", "tok"), completion(resp, now, now.Add(time.Hour))))

	// A replay writes nothing: it is answered, after the WAIT that went
	// with it.
	start = time.Now()
	res, err := claim("done", "tok2")
	if err != nil || res.Existing == nil || res.Existing.State != store.Completed {
		t.Fatalf("replay with the replica stopped: %+v, %v", res, err)
	}
	t.Logf("a replay with the replica stopped took %v", time.Since(start).Round(time.Millisecond))
	// A release does not wait.
	start = time.Now()
	if err := s.Release(ctx, holdOf("s", "released", "tok")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d >= replicaWait {
		t.Errorf("release took %v: it should not wait for the replica", d)
	}
	// A lost claim is lost, whatever the replicas.
	if err := s.Complete(ctx, holdOf("s", "nothing", "tok"), completion(resp, now, now.Add(time.Hour))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete without a record = %v, want ErrLeaseLost", err)
	}

	rs.replica.thaw()
	waitInSync(t, rs.client, 1)
	// Now acknowledged: the completed record is reported lost, which the
	// engine's background completion checks with Get.
	if err := s.Complete(ctx, holdOf("s", "held", "tok"), completion(resp, now, now.Add(time.Hour))); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("Complete of the completed record, acknowledged = %v, want ErrLeaseLost", err)
	}
	if rec, ok := onReplica("held"); !ok || rec.State != store.Completed {
		t.Fatalf("the completed record is not on the replica: %+v %v", rec, ok)
	}
	// The re-asserted expiry is the record's own.
	ttl, err := rs.client.PTTL(ctx, s.Key("s", "held")).Result()
	if err != nil || ttl > time.Hour || ttl < time.Hour-time.Minute {
		t.Fatalf("PTTL after the re-assert = %v, %v", ttl, err)
	}
}

// TestReplicasEngine runs the engine on a Store with WithReplicas while
// the replica stops acknowledging: before the handler the request gets
// 503 and the handler does not run; after it the client gets its
// response, and the engine's background completion lands once the
// replica is back.
func TestReplicasEngine(t *testing.T) {
	t.Parallel() // on servers of its own, it mostly waits
	rs := startReplicated(t)
	s := newTestStore(t, rs.client, noFailover, WithReplicas(1, replicaWait))
	var mu sync.Mutex
	var events []idem.Event
	engine, err := idem.New(s, idem.WithObserver(func(_ context.Context, ev idem.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.Close(context.Background()) })
	outcomes := func() []idem.Outcome {
		mu.Lock()
		defer mu.Unlock()
		var o []idem.Outcome
		for _, ev := range events {
			o = append(o, ev.Outcome)
		}
		return o
	}
	var runs int
	var inHandler func()
	h := engine.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		if inHandler != nil {
			inHandler()
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", runs)
	}))
	post := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}

	t.Run("before the handler", func(t *testing.T) {
		rs.replica.freeze()
		if w := post("k1"); w.Code != http.StatusServiceUnavailable || runs != 0 {
			t.Fatalf("with the replica stopped: %d %q, %d runs; want 503 and no run", w.Code, w.Body, runs)
		}
		rs.replica.thaw()
		waitInSync(t, rs.client, 1)
		// The orphaned claim is released in the background; the retry runs.
		deadline := time.Now().Add(5 * time.Second)
		for {
			w := post("k1")
			if w.Code == http.StatusCreated && w.Body.String() == "order 1" {
				break
			}
			if w.Code != http.StatusConflict || time.Now().After(deadline) {
				t.Fatalf("retry: %d %q", w.Code, w.Body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("after the handler", func(t *testing.T) {
		inHandler = rs.replica.freeze
		if w := post("k2"); w.Code != http.StatusCreated || w.Body.String() != "order 2" {
			t.Fatalf("first: %d %q, want the handler's answer", w.Code, w.Body)
		}
		inHandler = nil
		// The completion is on the primary, not acknowledged: this
		// engine keeps trying it in the background and answers a retry
		// 409 meanwhile (never a second run).
		if w := post("k2"); w.Code != http.StatusConflict || runs != 2 {
			t.Fatalf("retry while the completion is pending: %d %q, %d runs; want 409 and no run", w.Code, w.Body, runs)
		}
		if o := outcomes(); slices.Contains(o, idem.OutcomeCompletedLate) {
			t.Fatalf("the completion was reported landed while the replica was stopped: %v", o)
		}
		time.Sleep(time.Second) // background tries fail meanwhile
		if o := outcomes(); slices.Contains(o, idem.OutcomeCompletedLate) {
			t.Fatalf("the completion was reported landed while the replica was stopped: %v", o)
		}
		rs.replica.thaw()
		deadline := time.Now().Add(5 * time.Second)
		for !slices.Contains(outcomes(), idem.OutcomeCompletedLate) {
			if time.Now().After(deadline) {
				t.Fatalf("no completed_late within 5s of the replica's return: %v", outcomes())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if w := post("k2"); w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != "order 2" {
			t.Fatalf("retry once acknowledged: %d %q, want the replay", w.Code, w.Body)
		}
		if runs != 2 {
			t.Fatalf("%d runs, want 2", runs)
		}
		t.Logf("outcomes: %v", outcomes())
	})
}

// TestReplicasConformance runs the shared store suite with WithReplicas
// on a primary and its replica, on both claim paths.
func TestReplicasConformance(t *testing.T) {
	rs := startReplicated(t)
	for _, script := range []bool{false, true} {
		t.Run(fmt.Sprint("scriptClaims=", script), func(t *testing.T) {
			conformance.RunStore(t, func(t *testing.T) store.Store {
				s := newTestStore(t, rs.client, noFailover, WithReplicas(1, time.Second))
				s.scriptClaims = script
				return s
			})
		})
	}
}

// TestReplicasCluster runs WithReplicas on a Redis Cluster of three
// masters with a replica each: the shared suite passes, a claim waits for
// the replica of its own shard only (a stopped replica fails the claims
// of its shard and no other, which a WAIT sent to another node would
// hide), and New checks the eviction policy of every master.
func TestReplicasCluster(t *testing.T) {
	client, nodes := startClusterOf(t, 1, quickNodeTimeout)
	t.Run("conformance", func(t *testing.T) {
		conformance.RunStore(t, func(t *testing.T) store.Store { return newTestStore(t, client, WithReplicas(1, time.Second)) })
	})

	t.Run("per shard", func(t *testing.T) {
		s := newTestStore(t, client, WithReplicas(1, replicaWait))
		ctx := t.Context()
		master := func(key string) string {
			t.Helper()
			m, err := client.MasterForKey(ctx, s.Key("s", key))
			if err != nil {
				t.Fatal(err)
			}
			return m.Options().Addr
		}
		// Keys on the first shard, and on the others.
		var mine, others []string
		first := master("k0")
		for i := 0; len(mine) < 3 || len(others) < 6; i++ {
			key := fmt.Sprint("k", i)
			if master(key) == first {
				mine = append(mine, key)
			} else {
				others = append(others, key)
			}
		}
		// The replica of the first shard's master.
		var replica *server
		for addr, srv := range nodes {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			info, err := c.Info(ctx, "replication").Result()
			_ = c.Close()
			if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+fmt.Sprint(nodes[first].port)+"\r\n") {
				replica = srv
			}
		}
		if replica == nil {
			t.Fatalf("no replica of %s", first)
		}
		now := time.Now()
		claim := func(key string) error {
			_, err := s.Claim(ctx, store.Claim{Scope: "s", Key: key, Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)})
			return err
		}
		replica.freeze()
		for _, key := range mine {
			if err := claim(key); !errors.Is(err, ErrNotReplicated) {
				t.Fatalf("claim %s on the shard whose replica is stopped = %v, want ErrNotReplicated", key, err)
			}
		}
		for _, key := range others {
			if err := claim(key); err != nil {
				t.Fatalf("claim %s on another shard = %v", key, err)
			}
		}
		replica.thaw()
	})

	t.Run("eviction policy", func(t *testing.T) {
		one, err := client.MasterForKey(t.Context(), "any")
		if err != nil {
			t.Fatal(err)
		}
		if err := one.ConfigSet(t.Context(), "maxmemory", "64mb").Err(); err != nil {
			t.Fatal(err)
		}
		if err := one.ConfigSet(t.Context(), "maxmemory-policy", "volatile-lru").Err(); err != nil {
			t.Fatal(err)
		}
		_, err = New(client)
		if !errors.Is(err, ErrEvictionPolicy) || !strings.Contains(err.Error(), one.Options().Addr) {
			t.Fatalf("New = %v, want ErrEvictionPolicy naming %s", err, one.Options().Addr)
		}
		if err := one.ConfigSet(t.Context(), "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// New warns once when a master has fewer replicas connected than
// WithReplicas asks for, and works.
func TestReplicasTooFew(t *testing.T) {
	rs := startReplicated(t)
	for _, tc := range []struct {
		n    int
		warn bool
	}{{1, false}, {2, true}} {
		var log bytes.Buffer
		s, err := New(rs.client, noFailover, WithReplicas(tc.n, replicaWait), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		got := strings.Count(log.String(), "\n")
		if tc.warn != (got == 1) || got > 1 || (tc.warn && !strings.Contains(log.String(), "1 connected")) {
			t.Fatalf("WithReplicas(%d) on a primary with 1 replica logged %q", tc.n, log.String())
		}
		t.Logf("WithReplicas(%d): %q", tc.n, log.String())
	}
}
