package redisstore

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

// sentinelRig is a primary, a replica and three Sentinels on loopback
// ports, and a failover client that follows the primary. The replica
// reaches the primary through link, a proxy the test can cut so that a
// write never reaches the replica.
type sentinelRig struct {
	t                testing.TB
	primary, replica *server
	link             *conformance.Proxy
	sentinels        []*server
	opts             *redis.FailoverOptions
	client           *redis.Client // the failover client
}

const masterName = "mymaster"

func startSentinelRig(t testing.TB) *sentinelRig {
	t.Helper()
	rig := &sentinelRig{t: t}
	rig.primary = startServer(t, "--repl-diskless-sync-delay", "0")
	rig.link = conformance.NewProxy(t, rig.primary.addr())
	_, linkPort, _ := net.SplitHostPort(rig.link.Addr())
	rig.replica = startServer(t, "--replicaof", "127.0.0.1", linkPort, "--repl-diskless-sync-delay", "0")
	pc := redis.NewClient(&redis.Options{Addr: rig.primary.addr(), ContextTimeoutEnabled: true})
	waitInSync(t, pc, 1)
	_ = pc.Close()

	var addrs []string
	for range 3 {
		s := launch(t, false, func(port int, dir string) []string {
			// A long failover-timeout: it is also how long Sentinel waits
			// before it repoints a replica whose master address differs
			// from its own view (+fix-slave-config), which would route the
			// replica around the proxy.
			return []string{writeConf(t, dir, []string{
				fmt.Sprint("port ", port), "bind 127.0.0.1", "daemonize no",
				"dir " + dir, "logfile " + filepath.Join(dir, "redis.log"),
				fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", masterName, rig.primary.port),
				fmt.Sprintf("sentinel down-after-milliseconds %s 1000", masterName),
				fmt.Sprintf("sentinel failover-timeout %s 60000", masterName),
			}), "--sentinel"}
		})
		rig.sentinels = append(rig.sentinels, s)
		addrs = append(addrs, s.addr())
	}
	// Every Sentinel must know the replica, and see it linked, before it
	// can promote it.
	for _, s := range rig.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true})
		deadline := time.Now().Add(15 * time.Second)
		for {
			replicas, err := sc.Replicas(context.Background(), masterName).Result()
			if err == nil && slices.ContainsFunc(replicas, func(r map[string]string) bool {
				return r["port"] == fmt.Sprint(rig.replica.port) && r["flags"] == "slave" && r["master-link-status"] == "ok"
			}) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Sentinel %s does not see the replica: %v %v", s.addr(), replicas, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = sc.Close()
	}
	rig.opts = &redis.FailoverOptions{MasterName: masterName, SentinelAddrs: addrs, ContextTimeoutEnabled: true}
	rig.client = redis.NewFailoverClient(rig.opts)
	t.Cleanup(func() { _ = rig.client.Close() })
	rig.follows(rig.primary)
	return rig
}

// follows waits until the failover client's connections go to srv, as
// primary.
func (rig *sentinelRig) follows(srv *server) {
	rig.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(15 * time.Second)
	for ok := 0; ok < 3; {
		info, err := rig.client.Info(ctx, "server", "replication").Result()
		if err == nil && strings.Contains(info, fmt.Sprintf("tcp_port:%d\r\n", srv.port)) && strings.Contains(info, "role:master\r\n") {
			ok++
			continue
		}
		ok = 0
		if time.Now().After(deadline) {
			rig.t.Fatalf("the failover client does not follow %s: %v", srv.addr(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failover forces a failover to the replica and waits until the client
// follows it. The old primary stays up; Sentinel reconfigures it as a
// replica of the new one some seconds later (+convert-to-slave).
func (rig *sentinelRig) failover() {
	rig.t.Helper()
	sc := redis.NewSentinelClient(&redis.Options{Addr: rig.sentinels[0].addr(), ContextTimeoutEnabled: true})
	defer sc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := sc.Failover(context.Background(), masterName).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			rig.t.Fatalf("SENTINEL FAILOVER: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rig.follows(rig.replica)
}

// TestSentinelFailover is the failover loss WithReplicas exists for. The
// replication link is cut while the handler runs, so the completed record
// reaches the primary only; then Sentinel fails over to the replica and
// the client retries. Without the option the completion is lost and the
// handler runs again; with it the completion fails its WAIT, the engine
// keeps trying in the background, lands it on the new primary, and the
// retry replays.
func TestSentinelFailover(t *testing.T) {
	t.Parallel() // on servers of its own, it mostly waits
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"without WithReplicas", nil},
		{"with WithReplicas", []Option{WithReplicas(1, replicaWait)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			rig := startSentinelRig(t)
			t.Logf("primary, replica and three Sentinels up in %v", time.Since(start).Round(time.Millisecond))
			s := newTestStore(t, rig.client, append(tc.opts, WithSentinel(rig.opts))...)
			// down-after-milliseconds 1000: a failover takes up to 6 s,
			// which the engine's default lease (15 s, 10 s of it left after
			// a heartbeat) outlasts. A claim that the replica holds but
			// that no one completes blocks retries for the rest of its
			// lease.
			if got := s.FailoverTime(); got != sentinelBound(time.Second) {
				t.Fatalf("FailoverTime = %v, want %v", got, sentinelBound(time.Second))
			}
			var mu sync.Mutex
			var outcomes []idem.Outcome
			engine, err := idem.New(s, idem.WithObserver(func(_ context.Context, ev idem.Event) {
				mu.Lock()
				outcomes = append(outcomes, ev.Outcome)
				mu.Unlock()
				if ev.Err != nil {
					t.Logf("event %s: %v", ev.Outcome, ev.Err)
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = engine.Close(ctx)
			})
			var runs int
			cut := false
			h := engine.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				if cut {
					rig.link.Set(conformance.ProxyDown) // the completion will reach the primary only
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "order %d", runs)
			}))
			post := func() *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":1}`))
				req.Header.Set("Idempotency-Key", "k")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				return w
			}

			cut = true
			if w := post(); w.Code != http.StatusCreated || w.Body.String() != "order 1" {
				t.Fatalf("first request: %d %q", w.Code, w.Body)
			}
			cut = false
			done := time.Now()
			rig.failover()
			t.Logf("failed over in %v", time.Since(done).Round(time.Millisecond))

			// What the new primary holds for the key.
			rc := redis.NewClient(&redis.Options{Addr: rig.replica.addr(), ContextTimeoutEnabled: true})
			defer rc.Close()
			state := "no record"
			keys, err := rc.Keys(t.Context(), s.prefix+"{*").Result()
			if err != nil || len(keys) > 1 {
				t.Fatal(keys, err)
			}
			for _, k := range keys {
				v, err := rc.Get(t.Context(), k).Result()
				if err != nil {
					t.Fatal(err)
				}
				rec, err := decodeRecord(v)
				if err != nil {
					t.Fatal(err)
				}
				state = rec.State.String()
			}
			t.Logf("the new primary holds: %s", state)

			// The client retries, honouring Retry-After: 1 as 409s and 503s
			// come.
			var w *httptest.ResponseRecorder
			var retries int
			for deadline := time.Now().Add(30 * time.Second); ; retries++ {
				w = post()
				if w.Code != http.StatusConflict && w.Code != http.StatusServiceUnavailable {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("still %d 30s after the failover", w.Code)
				}
				time.Sleep(250 * time.Millisecond)
			}
			t.Logf("retry after the failover: %d %q, replayed %q, after %d 409s and 503s, %v after the first answer",
				w.Code, w.Body, w.Header().Get("Idempotent-Replayed"), retries, time.Since(done).Round(time.Millisecond))
			if tc.opts == nil {
				// The loss, as documented: the handler ran twice.
				if state == store.Completed.String() {
					t.Fatal("the completed record reached the replica although the link was cut")
				}
				if w.Header().Get("Idempotent-Replayed") != "" || runs != 2 {
					t.Fatalf("without WithReplicas: %d %q, %d runs; want the loss (a second run)", w.Code, w.Body, runs)
				}
				return
			}
			if w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != "order 1" || runs != 1 {
				t.Fatalf("with WithReplicas: %d %q, %d runs; want the replay of order 1", w.Code, w.Body, runs)
			}
			// The background completion ends once the record is acknowledged
			// by a replica of the new primary: the old one, reattached here
			// as Sentinel would on its own some 8 s later (+convert-to-slave).
			pc := redis.NewClient(&redis.Options{Addr: rig.primary.addr(), ContextTimeoutEnabled: true})
			defer pc.Close()
			if err := pc.ReplicaOf(t.Context(), "127.0.0.1", fmt.Sprint(rig.replica.port)).Err(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(20 * time.Second); ; {
				mu.Lock()
				landed := slices.Contains(outcomes, idem.OutcomeCompletedLate)
				mu.Unlock()
				if landed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no completed_late 20s after the failover: %v", outcomes)
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("completion acknowledged %v after the first answer; outcomes %v", time.Since(done).Round(time.Millisecond), outcomes)
		})
	}
}
