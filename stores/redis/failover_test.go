package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/redis/go-redis/v9"
)

// This file kills a primary with SIGKILL while requests are in flight,
// at Redis's default failover timings, and checks that no request runs
// twice (issue 16, item 17).

// sentinelDeployment is a primary, its replicas and three Sentinels on
// loopback ports, each Sentinel with the given extra configuration lines
// (none: Redis's defaults, down-after-milliseconds 30000 and
// failover-timeout 180000), and a failover client that follows the
// primary.
type sentinelDeployment struct {
	primary   *server
	replicas  []*server
	sentinels []*server
	addrs     []string // the Sentinels'
	client    *redis.Client
}

func startSentinels(t testing.TB, replicas int, conf ...string) *sentinelDeployment {
	t.Helper()
	d := &sentinelDeployment{}
	d.primary = startServer(t, freePort(t, false), "--repl-diskless-sync-delay", "0")
	for range replicas {
		d.replicas = append(d.replicas, startServer(t, freePort(t, false),
			"--replicaof", "127.0.0.1", fmt.Sprint(d.primary.port), "--repl-diskless-sync-delay", "0"))
	}
	if replicas > 0 {
		pc := redis.NewClient(&redis.Options{Addr: d.primary.addr(), ContextTimeoutEnabled: true})
		waitInSync(t, pc, replicas)
		_ = pc.Close()
	}
	for range 3 {
		port := freePort(t, false)
		dir := filepath.Join(t.TempDir(), fmt.Sprint("sentinel-", port))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		lines := []string{
			fmt.Sprint("port ", port), "bind 127.0.0.1", "daemonize no",
			"dir " + dir, "logfile " + filepath.Join(dir, "redis.log"),
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", masterName, d.primary.port),
		}
		lines = append(lines, conf...)
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s := &server{t: t, port: port, dir: dir, args: []string{path, "--sentinel"}}
		s.start()
		t.Cleanup(s.kill)
		d.sentinels = append(d.sentinels, s)
		d.addrs = append(d.addrs, s.addr())
	}
	// Every Sentinel must know the other two (to reach the quorum and
	// elect a leader) and every replica (to promote one). Sentinel asks
	// the primary for its replicas every 10 s.
	for _, s := range d.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.addr(), ContextTimeoutEnabled: true})
		deadline := time.Now().Add(30 * time.Second)
		for {
			m, err := sc.Master(context.Background(), masterName).Result()
			rs, err2 := sc.Replicas(context.Background(), masterName).Result()
			linked := 0
			for _, r := range rs {
				if r["flags"] == "slave" && r["master-link-status"] == "ok" {
					linked++
				}
			}
			if err == nil && err2 == nil && m["num-other-sentinels"] == "2" && linked == replicas {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Sentinel %s does not see the deployment: %v %v, replicas %v %v", s.addr(), m, err, rs, err2)
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = sc.Close()
	}
	d.client = redis.NewFailoverClient(d.failoverOptions())
	t.Cleanup(func() { _ = d.client.Close() })
	return d
}

// failoverOptions are the options of the deployment's failover client.
func (d *sentinelDeployment) failoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: masterName, SentinelAddrs: d.addrs, ContextTimeoutEnabled: true}
}

// killRig is a deployment whose primary the test kills.
type killRig struct {
	client redis.UniversalClient
	opts   []Option // Store options beyond WithReplicas
	// primaryOf returns the server that is the primary for a Redis key.
	primaryOf func(t *testing.T, key string) *server
	// replicasOf returns the replicas of a primary.
	replicasOf func(t *testing.T, primary *server) []*server
}

// role returns the role line of srv's INFO replication ("master",
// "slave"), or "" when it does not answer.
func role(srv *server) string {
	c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\r\n") {
		if r, ok := strings.CutPrefix(line, "role:"); ok {
			return r
		}
	}
	return ""
}

// neverTwiceAcrossKill runs n requests whose records live on one primary,
// kills that primary with SIGKILL while their handlers run, lets the
// handlers finish while it is dead (their completions move to the
// background), waits for a replica's promotion, and sends each request's
// retry: none may run the handler again, and each must get the replay.
func neverTwiceAcrossKill(t *testing.T, rig killRig, n int) {
	s := newTestStore(t, rig.client, append([]Option{WithReplicas(1, replicaWait)}, rig.opts...)...)
	var mu sync.Mutex
	outcomes := map[idem.Outcome]int{}
	engine, err := idem.New(s,
		idem.WithLogger(slog.New(slog.DiscardHandler)),
		idem.WithObserver(func(_ context.Context, ev idem.Event) {
			mu.Lock()
			outcomes[ev.Outcome]++
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = engine.Close(ctx)
	})
	t.Logf("engine lease %v", engine.Lease())

	// n keys whose records live on one primary: the victim.
	scope := idem.Scope("", http.MethodPost, "")
	victim := rig.primaryOf(t, s.Key(scope, "order-0"))
	var keys []string
	for i := 0; len(keys) < n; i++ {
		key := fmt.Sprint("order-", i)
		if rig.primaryOf(t, s.Key(scope, key)) == victim {
			keys = append(keys, key)
		}
	}
	replicas := rig.replicasOf(t, victim)
	if len(replicas) == 0 {
		t.Fatalf("the primary %s has no replica", victim.addr())
	}

	runs := map[string]int{}
	started := make(chan string, 2*n)
	release := make(chan struct{})
	h := engine.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		runs[key]++
		run := runs[key]
		mu.Unlock()
		select {
		case started <- key:
		default:
		}
		<-release
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s run %d", key, run)
	}))
	post := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":1}`))
		req.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}

	firsts := make([]*httptest.ResponseRecorder, n)
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Go(func() { firsts[i] = post(key) })
	}
	for range n {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			close(release)
			t.Fatal("the handlers did not all start within 10s")
		}
	}

	killed := time.Now()
	victim.kill()
	time.Sleep(time.Second) // the handlers finish while the primary is dead
	close(release)
	wg.Wait()
	for i, w := range firsts {
		if w.Code != http.StatusCreated || w.Body.String() != keys[i]+" run 1" {
			t.Errorf("first request %s, answered with the primary dead: %d %q, want the handler's answer", keys[i], w.Code, w.Body)
		}
	}
	t.Logf("%d first requests answered %v after the kill", n, time.Since(killed).Round(time.Millisecond))

	var promoted *server
	for promoted == nil {
		for _, r := range replicas {
			if role(r) == "master" {
				promoted = r
			}
		}
		if time.Since(killed) > 2*time.Minute {
			t.Fatal("no replica promoted within 2 minutes of the kill")
		}
		time.Sleep(100 * time.Millisecond)
	}
	promotion := time.Since(killed)
	t.Logf("replica %s promoted %v after the kill", promoted.addr(), promotion.Round(100*time.Millisecond))

	// Each client retries, honouring Retry-After: 1 as 409s and 503s come.
	finals := make([]*httptest.ResponseRecorder, n)
	waits := make([]int, n)
	for i, key := range keys {
		wg.Go(func() {
			deadline := time.Now().Add(engine.Lease() + 30*time.Second)
			for {
				w := post(key)
				if (w.Code != http.StatusConflict && w.Code != http.StatusServiceUnavailable) || time.Now().After(deadline) {
					finals[i] = w
					return
				}
				waits[i]++
				time.Sleep(250 * time.Millisecond)
			}
		})
	}
	wg.Wait()

	var twice []string
	for i, key := range keys {
		w := finals[i]
		mu.Lock()
		r := runs[key]
		mu.Unlock()
		if r > 1 {
			twice = append(twice, key)
		}
		if w.Header().Get("Idempotent-Replayed") != "true" || w.Body.String() != key+" run 1" {
			t.Errorf("retry of %s after the promotion: %d %q (replayed %q) after %d 409s and 503s; want the replay of %q",
				key, w.Code, w.Body, w.Header().Get("Idempotent-Replayed"), waits[i], key+" run 1")
		}
	}
	mu.Lock()
	t.Logf("outcomes: %v", outcomes)
	mu.Unlock()
	if len(twice) > 0 {
		t.Errorf("%d of %d requests in flight ran twice across a failover %v long (lease %v): %v",
			len(twice), n, promotion.Round(100*time.Millisecond), engine.Lease(), twice)
	}
}

// TestSentinelKillNeverTwice kills the primary of a Sentinel deployment
// at Redis's default timings (down-after-milliseconds 30000), with 16
// requests in flight.
func TestSentinelKillNeverTwice(t *testing.T) {
	t.Parallel() // on servers of its own, it mostly waits
	d := startSentinels(t, 2)
	neverTwiceAcrossKill(t, killRig{
		client:     d.client,
		primaryOf:  func(*testing.T, string) *server { return d.primary },
		replicasOf: func(*testing.T, *server) []*server { return d.replicas },
	}, 16)
}

// TestClusterKillNeverTwice kills a master of a Redis Cluster at Redis's
// default timings (cluster-node-timeout 15000), with 4 requests in flight
// on its shard.
func TestClusterKillNeverTwice(t *testing.T) {
	t.Parallel() // on servers of its own, it mostly waits
	client, nodes := startClusterOf(t, 2, 15*time.Second)
	neverTwiceAcrossKill(t, killRig{
		client: client,
		primaryOf: func(t *testing.T, key string) *server {
			m, err := client.MasterForKey(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			return nodes[m.Options().Addr]
		},
		replicasOf: func(t *testing.T, primary *server) []*server {
			var rs []*server
			for _, srv := range nodes {
				c := redis.NewClient(&redis.Options{Addr: srv.addr(), ContextTimeoutEnabled: true})
				info, err := c.Info(t.Context(), "replication").Result()
				_ = c.Close()
				if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, fmt.Sprintf("master_port:%d\r\n", primary.port)) {
					rs = append(rs, srv)
				}
			}
			slices.SortFunc(rs, func(a, b *server) int { return a.port - b.port })
			return rs
		},
	}, 4)
}
