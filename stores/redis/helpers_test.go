package redisstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/redis/go-redis/v9"
)

const defaultRedisURL = "redis://127.0.0.1:6379/0"

// unavailable skips the test, or fails it when CI is set: in CI every
// server the tests need must be there.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("%s (CI is set, so this fails instead of skipping)", msg)
	}
	t.Skipf("%s; skipping (set CI=1 to make this a failure)", msg)
}

// testClient returns a client for the server at IDEM_TEST_REDIS_URL
// (default redis://127.0.0.1:6379/0), closed when the test ends.
func testClient(t testing.TB) *redis.Client {
	t.Helper()
	url := os.Getenv("IDEM_TEST_REDIS_URL")
	if url == "" {
		url = defaultRedisURL
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("IDEM_TEST_REDIS_URL=%q: %v", url, err)
	}
	opt.ContextTimeoutEnabled = true
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		unavailable(t, "Redis at %s (IDEM_TEST_REDIS_URL) is unreachable: %v", url, err)
	}
	return client
}

// randomPrefix returns a key prefix no other test run uses.
func randomPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "idemtest:" + hex.EncodeToString(b[:]) + ":"
}

// newTestStore returns a Store on client under a fresh prefix. When the
// test ends the Store is closed and every key under the prefix deleted.
func newTestStore(t testing.TB, client redis.UniversalClient, opts ...Option) *Store {
	t.Helper()
	prefix := randomPrefix()
	s, err := New(client, append([]Option{WithPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deletePrefix(ctx, client, prefix); err != nil {
			t.Errorf("cleaning up %s*: %v", prefix, err)
		}
	})
	return s
}

// deletePrefix deletes every key under prefix, on every master of a
// cluster.
func deletePrefix(ctx context.Context, client redis.UniversalClient, prefix string) error {
	del := func(ctx context.Context, c *redis.Client) error {
		// One pipeline of DELs per SCAN page: a test that wrote 20,000
		// keys is cleaned up in 40 round trips, not 20,000.
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, prefix+"*", 500).Result()
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				pipe := c.Pipeline()
				for _, k := range keys {
					pipe.Del(ctx, k) // one key each: a cluster's keys may lie in many slots
				}
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, del)
	case *redis.Client:
		return del(ctx, c)
	}
	return fmt.Errorf("unsupported client %T", client)
}

// redisServerPath returns the redis-server binary, or skips (fails in CI).
func redisServerPath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server is not installed: %v", err)
	}
	return p
}

// freePort returns a loopback TCP port that is free now, and whose
// cluster bus port (port+10000) is free too when bus is set.
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			_ = l.Close()
			return port
		}
		if port+10000 > 65535 {
			_ = l.Close()
			continue
		}
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+10000))
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = l2.Close()
		return port
	}
	t.Fatal("no free port pair found")
	return 0
}

// server is a redis-server child process of the test.
type server struct {
	t    testing.TB
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
	exit chan struct{}
}

// startServer runs redis-server on a free loopback port with extra args,
// in a directory under t.TempDir(), and waits until it answers PING. The
// process is killed when the test ends, also on failure; the kernel kills
// it too should the test binary die first.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	return launch(t, false, func(port int, dir string) []string {
		return append(serverArgs(port, dir), extra...)
	})
}

// serverArgs are the arguments of a test's redis-server: loopback, no
// persistence, its log in dir.
func serverArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"),
	}
}

// launch starts a redis-server (or a Sentinel) on a free loopback port
// (one whose cluster bus port is free too when bus is set), with the
// arguments args gives for that port and a fresh directory, and kills it
// when the test ends. freePort's port is free only until its listener
// closes: another test's server, or an outgoing connection's ephemeral
// port, can take it before the server binds it. launch then tries a
// fresh port, up to five times.
func launch(t testing.TB, bus bool, args func(port int, dir string) []string) *server {
	t.Helper()
	var err error
	for range 5 {
		port := freePort(t, bus)
		dir := filepath.Join(t.TempDir(), "redis-"+strconv.Itoa(port))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		s := &server{t: t, port: port, dir: dir, args: args(port, dir)}
		if err = s.tryStart(); err == nil {
			t.Cleanup(s.kill)
			return s
		}
		if !errors.Is(err, errPortTaken) {
			t.Fatal(err)
		}
	}
	t.Fatal(err)
	return nil
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// errPortTaken reports that another process holds the server's port.
var errPortTaken = errors.New("port taken by another process")

// start runs the server again on its port (after kill) and waits until it
// answers PING, or fails the test.
func (s *server) start() {
	s.t.Helper()
	if err := s.tryStart(); err != nil {
		s.t.Fatal(err)
	}
}

// tryStart runs the server and waits until it answers PING, and answers
// it as this process: INFO's process_id is the child's. A server that
// exits because its address is in use, or a port that another process
// answers on, is errPortTaken.
func (s *server) tryStart() error {
	cmd := exec.Command(redisServerPath(s.t), s.args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server on port %d: %w", s.port, err)
	}
	s.cmd = cmd
	s.exit = make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.exit) }()

	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := c.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			if pid := infoField(info, "process_id"); pid != strconv.Itoa(cmd.Process.Pid) {
				s.kill()
				return fmt.Errorf("redis-server on port %d: process %s answers, not %d: %w", s.port, pid, cmd.Process.Pid, errPortTaken)
			}
			return nil
		}
		select {
		case <-s.exit:
			s.cmd = nil
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			if bytes.Contains(log, []byte("Address already in use")) {
				return fmt.Errorf("redis-server on port %d: %w", s.port, errPortTaken)
			}
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, log)
		default:
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server on port %d did not answer PING: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeConf writes a Sentinel's configuration lines to dir/sentinel.conf
// and returns its path.
func writeConf(t testing.TB, dir string, lines []string) string {
	t.Helper()
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// infoField returns a field of an INFO reply, or "".
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// kill stops the server with SIGKILL and waits for it to exit.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exit
	s.cmd = nil
}

// startCluster starts three cluster-enabled redis-server processes on free
// loopback ports, joins them with redis-cli --cluster create, waits until
// every node reports cluster_state:ok, and returns a cluster client. All is
// torn down when the test ends.
func startCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	client, _ := startClusterOf(t, 0, quickNodeTimeout)
	return client
}

// quickNodeTimeout is the cluster-node-timeout of the test clusters that
// are not about failover timings: a failover there takes seconds.
const quickNodeTimeout = 2 * time.Second

// startClusterOf is startCluster with replicas replicas per master
// (3 × (1 + replicas) processes), each in sync with its master before it
// returns, and cluster-node-timeout nodeTimeout. It also returns every
// node's server, by address.
func startClusterOf(t testing.TB, replicas int, nodeTimeout time.Duration) (*redis.ClusterClient, map[string]*server) {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		unavailable(t, "redis-cli is not installed: %v", err)
	}
	redisServerPath(t)
	var addrs []string
	nodes := map[string]*server{}
	for len(addrs) < 3*(1+replicas) {
		s := launch(t, true, func(port int, dir string) []string {
			return append(serverArgs(port, dir),
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(port)+".conf"),
				"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
				"--repl-diskless-sync-delay", "0",
			)
		})
		addrs = append(addrs, s.addr())
		nodes[s.addr()] = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	create := exec.CommandContext(ctx, cli, append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if ctx.Err() != nil {
				_ = c.Close()
				t.Fatalf("node %s never reached cluster_state:ok: %v\n%s", addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = c.Close()
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	// The client learns the slot map on first use; make sure it sees all
	// three masters before the tests start.
	for {
		var n atomic.Int32
		err := client.ForEachMaster(ctx, func(context.Context, *redis.Client) error { n.Add(1); return nil })
		if err == nil && n.Load() == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("cluster client sees %d masters: %v", n.Load(), err)
		}
		client.ReloadState(ctx)
		time.Sleep(50 * time.Millisecond)
	}
	if replicas > 0 {
		// A key on each master to write for the check.
		probe := map[string]string{}
		for i := 0; len(probe) < 3; i++ {
			key := "idemtest:sync-probe:" + strconv.Itoa(i)
			m, err := client.MasterForKey(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := probe[m.Options().Addr]; !ok {
				probe[m.Options().Addr] = key
			}
		}
		err := client.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			return inSync(c, replicas, probe[c.Options().Addr])
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return client, nodes
}

// refOf, holdOf and completion build the store package's arguments.
func refOf(scope, key string) store.Ref { return store.Ref{Scope: scope, Key: key} }

func holdOf(scope, key, token string) store.Hold {
	return store.Hold{Ref: refOf(scope, key), Token: token}
}

func completion(res store.Result, now, expiresAt time.Time) store.Completion {
	return store.Completion{Result: res, Now: now, ExpiresAt: expiresAt}
}

// headerBytes encodes h in the engine's header format (format byte 1, the
// number of names, then each name, sorted, with its values, every string
// a uvarint length and its bytes): what records written before results
// were opaque kept, and the header part of an HTTP Head.
func headerBytes(h http.Header) []byte {
	names := slices.Sorted(maps.Keys(h))
	b := []byte{1}
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(len(h[name])))
		for _, v := range h[name] {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

// httpHead returns the Head the engine keeps for an HTTP response with
// status and h: the one store.LegacyHead builds from the same parts.
func httpHead(status int, h http.Header) []byte {
	return store.LegacyHead(status, headerBytes(h))
}

// TestServerPortTaken: a server whose port another server holds is
// errPortTaken, the case launch retries, not a server that answers PING.
func TestServerPortTaken(t *testing.T) {
	t.Parallel()
	first := startServer(t)
	dir := t.TempDir()
	second := &server{t: t, port: first.port, dir: dir, args: serverArgs(first.port, dir)}
	if err := second.tryStart(); !errors.Is(err, errPortTaken) {
		second.kill()
		t.Fatalf("a second server on port %d: %v, want errPortTaken", first.port, err)
	}
	if again := startServer(t); again.port == first.port {
		t.Fatalf("launch gave the taken port %d", again.port)
	}
}
