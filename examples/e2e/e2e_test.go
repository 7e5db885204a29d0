package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

var bin string // folder of the built example programs

// buildFlags are go build's flags for the example programs: -race when
// the tests run with it (race_test.go).
var buildFlags []string

// goBuild is the go build command for the example programs, with
// buildFlags.
func goBuild(args ...string) *exec.Cmd {
	return exec.Command("go", append(append([]string{"build"}, buildFlags...), args...)...)
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-e2e-")
	if err != nil {
		panic(err)
	}
	bin = dir
	build := goBuild("-o", dir+string(os.PathSeparator),
		"github.com/idemkit/idem/examples/fixture",
		"github.com/idemkit/idem/examples/nethttp",
		"github.com/idemkit/idem/examples/chi",
		"github.com/idemkit/idem/examples/gin",
		"github.com/idemkit/idem/examples/echo",
		"github.com/idemkit/idem/examples/echov5",
		"github.com/idemkit/idem/examples/fiber",
		"github.com/idemkit/idem/examples/loadgen",
		"github.com/idemkit/idem/examples/client",
		"github.com/idemkit/idem/examples/natsconsumer",
		"github.com/idemkit/idem/examples/chaos",
		"github.com/idemkit/idem/examples/quickstart",
	)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the examples:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running example program.
type proc struct {
	url string
	cmd *exec.Cmd
}

// start runs an example program and waits for its "listening on" line.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, name), append([]string{"-addr", "127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &testWriter{t: t, prefix: name + ": "}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd}
	t.Cleanup(func() { p.kill() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
				t.Errorf("%s printed more than one line to stdout: %q", name, sc.Text())
			}
		}
	}()
	select {
	case line := <-lines:
		u, ok := strings.CutPrefix(line, "listening on ")
		if !ok {
			t.Fatalf("%s: first line %q, want \"listening on http://...\"", name, line)
		}
		p.url = u
	case <-time.After(30 * time.Second):
		t.Fatalf("%s %q did not start listening", name, args)
	}
	return p
}

func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
}

// stop sends SIGTERM and returns the exit code.
func (p *proc) stop(t *testing.T) int {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("no exit 15s after SIGTERM")
	}
	return p.cmd.ProcessState.ExitCode()
}

type testWriter struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(w.prefix + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type result struct {
	code   int
	header http.Header
	body   string
}

var client = &http.Client{Timeout: 30 * time.Second}

func call(t *testing.T, method, u, key, body string, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

func (r result) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

func counter(t *testing.T, p *proc) int {
	t.Helper()
	var c struct{ Count int }
	if err := json.Unmarshal([]byte(call(t, "GET", p.url+"/counter", "", "").body), &c); err != nil {
		t.Fatal(err)
	}
	return c.Count
}

func randomName() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// --- the memory store -----------------------------------------------------

func TestFixtureEveryFramework(t *testing.T) {
	for _, fw := range []string{"gin", "echo", "echov5", "chi", "nethttp", "fiber"} {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			p := start(t, "fixture", "-framework", fw)
			first := call(t, "POST", p.url+"/echo", "k1", "hello", "Content-Type", "text/plain")
			retry := call(t, "POST", p.url+"/echo", "k1", "hello", "Content-Type", "text/plain")
			if first.code != 201 || first.replayed() || retry.code != 201 || !retry.replayed() || retry.body != "hello" {
				t.Errorf("first %d %q, retry %d %q replayed=%v", first.code, first.body, retry.code, retry.body, retry.replayed())
			}
			if r := call(t, "POST", p.url+"/echo", "k1", "other"); r.code != 422 {
				t.Errorf("other body: %d", r.code)
			}
			if r := call(t, "POST", p.url+"/items/1", "k1", ""); r.code != 201 {
				t.Errorf("same key, other route: %d", r.code)
			}
			if r := call(t, "POST", p.url+"/items/2", "k1", ""); r.code != 422 {
				t.Errorf("same key, same template, other path: %d", r.code)
			}
			if r := call(t, "POST", p.url+"/panic", "p", ""); r.code != 500 {
				t.Errorf("panic: %d", r.code)
			}
			if n := counter(t, p); n != 3 {
				t.Errorf("counter %d, want 3", n)
			}
			if r := call(t, "POST", p.url+"/reset", "", ""); r.code != 204 || counter(t, p) != 0 {
				t.Errorf("reset: %d", r.code)
			}
			if code := p.stop(t); code != 0 {
				t.Errorf("exit code %d after SIGTERM", code)
			}
		})
	}
}

func TestFixtureBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-framework", "flask"},
		{"-store", "mongo"},
		{"-on-conflict", "maybe"},
		{"-ttl", "-1s"},
		{"-max-response", "-5"},
		{"-lease", "soon"},
		{"-exactly-once"}, // the memory store has no transactions
		{"-framework", "fiber", "-key-field", "request_id"},        // no Fiber equivalent
		{"-fingerprint", "json", "-fingerprint-ignore", "sent_at"}, // not a JSON Pointer
		{"-key-field", "\xff"},                                     // not UTF-8
	} {
		cmd := exec.Command(filepath.Join(bin, "fixture"), args...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || len(out) == 0 || strings.Contains(string(out), "goroutine") {
			t.Errorf("%q: exit %d, output %q; want 2 and a message, not a panic", args, code, out)
		}
	}
}

func TestOrdersExamples(t *testing.T) {
	for _, ex := range []string{"quickstart", "nethttp", "chi", "gin", "echo", "echov5", "fiber"} {
		t.Run(ex, func(t *testing.T) {
			t.Parallel()
			checkOrders(t, start(t, ex))
		})
	}
}

func checkOrders(t *testing.T, p *proc) {
	t.Helper()
	order := `{"item":"book","quantity":2}`
	first := call(t, "POST", p.url+"/orders", "o-"+randomName(), order, "Content-Type", "application/json")
	if first.code != 201 || first.header.Get("Location") == "" {
		t.Fatalf("create: %d %v %q", first.code, first.header, first.body)
	}
	key := "o-" + randomName()
	a := call(t, "POST", p.url+"/orders", key, order)
	b := call(t, "POST", p.url+"/orders", key, order)
	if a.code != 201 || !b.replayed() || a.body != b.body || a.header.Get("Location") != b.header.Get("Location") {
		t.Errorf("retry not replayed: %d %q / %d %q", a.code, a.body, b.code, b.body)
	}
	if r := call(t, "POST", p.url+"/orders", "", order); r.code != 400 {
		t.Errorf("no key: %d", r.code)
	}
	bad := "bad-" + randomName()
	if r1, r2 := call(t, "POST", p.url+"/orders", bad, `{"item":"x","quantity":0}`), call(t, "POST", p.url+"/orders", bad, `{"item":"x","quantity":0}`); r1.code != 400 || !r2.replayed() {
		t.Errorf("a 400 from the handler is stored and replayed: %d, %d %v", r1.code, r2.code, r2.replayed())
	}
	var o struct{ ID string }
	json.Unmarshal([]byte(a.body), &o)
	pay := call(t, "POST", p.url+"/orders/"+o.ID+"/payments", "pay-"+randomName(), `{"amount":12.5}`)
	if pay.code != 201 {
		t.Errorf("payment: %d %q", pay.code, pay.body)
	}
	if r := call(t, "POST", p.url+"/orders/nope/payments", "pay-"+randomName(), `{"amount":1}`); r.code != 404 {
		t.Errorf("payment on an unknown order: %d", r.code)
	}
	if r := call(t, "GET", p.url+"/orders/"+o.ID, "", ""); r.code != 200 {
		t.Errorf("get: %d", r.code)
	}
	if r := call(t, "GET", p.url+"/orders/nope", "", ""); r.code != 404 {
		t.Errorf("get unknown: %d", r.code)
	}
	var list []any
	if r := call(t, "GET", p.url+"/orders", "", ""); r.code != 200 || json.Unmarshal([]byte(r.body), &list) != nil || len(list) != 2 {
		t.Errorf("list: %d %q", r.code, r.body)
	}
}

// TestAdminHandler inspects a record through the chi example's admin
// endpoint, evicts it, and sees the next retry run again.
func TestAdminHandler(t *testing.T) {
	p := start(t, "chi", "-admin-token", "s3cret")
	order := `{"item":"book","quantity":1}`
	first := call(t, "POST", p.url+"/orders", "adm-1", order)
	admin := p.url + "/admin/idem?method=POST&route=/orders&key=adm-1"
	if r := call(t, "GET", admin, "", ""); r.code != 401 {
		t.Errorf("admin without the token: %d", r.code)
	}
	// Outside the idempotency middleware: a POST without a key is the
	// admin handler's 405 (or 401 without the token), never a 400
	// missing-key, and nothing of it is stored.
	if r := call(t, "POST", admin, "", ""); r.code != 401 {
		t.Errorf("admin POST without the token: %d %q, want 401", r.code, r.body)
	}
	for range 2 {
		if r := call(t, "POST", admin, "k-admin", "", "Authorization", "Bearer s3cret"); r.code != 405 || r.replayed() {
			t.Errorf("admin POST: %d replayed=%v, want a fresh 405 each time", r.code, r.replayed())
		}
	}
	auth := []string{"Authorization", "Bearer s3cret"}
	r := call(t, "GET", admin, "", "", auth...)
	if r.code != 200 || !strings.Contains(r.body, `"state":"completed"`) || !strings.Contains(r.body, `"status":201`) || strings.Contains(r.body, "book") {
		t.Fatalf("inspect: %d %s", r.code, r.body)
	}
	if r := call(t, "DELETE", admin, "", "", auth...); r.code != 200 || !strings.Contains(r.body, `"deleted":true`) {
		t.Fatalf("evict: %d %s", r.code, r.body)
	}
	again := call(t, "POST", p.url+"/orders", "adm-1", order)
	if again.replayed() || again.code != 201 || again.header.Get("Location") == first.header.Get("Location") {
		t.Errorf("after eviction the retry must run again: %d replayed=%v %s", again.code, again.replayed(), again.header.Get("Location"))
	}
}

func TestLoadgen(t *testing.T) {
	p := start(t, "chi")
	for _, keys := range []string{"unique", "hot", "replay80"} {
		out, err := exec.Command(filepath.Join(bin, "loadgen"), "-url", p.url+"/orders", "-keys", keys,
			"-duration", "300ms", "-concurrency", "4").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "201:") || strings.Contains(string(out), "errors 0,") == false {
			t.Errorf("loadgen -keys %s: %v: %s", keys, err, out)
		}
	}
	out, err := exec.Command(filepath.Join(bin, "loadgen"), "-url", "http://192.0.2.1:80/orders", "-duration", "1ms").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "loopback") {
		t.Errorf("loadgen accepted a non-loopback target: %v %s", err, out)
	}
}

// --- Redis and PostgreSQL -------------------------------------------------

// reachable skips the test when the server of rawURL does not answer, or
// fails it when CI is set.
func reachable(t *testing.T, env, def string) string {
	t.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (%s) unreachable and CI is set: %v", env, u.Host, err)
		}
		t.Skipf("%s (%s) unreachable: %v", env, u.Host, err)
	}
	conn.Close()
	return raw
}

const (
	redisDefault    = "redis://127.0.0.1:6379/0"
	postgresDefault = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	mysqlDefault    = "root@tcp(127.0.0.1:3306)/test"
	dynamoDefault   = "http://127.0.0.1:8000"
)

// reachableMySQL is reachable for a go-sql-driver DSN.
func reachableMySQL(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("IDEM_TEST_MYSQL_DSN")
	if dsn == "" {
		dsn = mysqlDefault
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("IDEM_TEST_MYSQL_DSN: %v", err)
	}
	conn, err := net.DialTimeout("tcp", cfg.Addr, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("IDEM_TEST_MYSQL_DSN (%s) unreachable and CI is set: %v", cfg.Addr, err)
		}
		t.Skipf("IDEM_TEST_MYSQL_DSN (%s) unreachable: %v", cfg.Addr, err)
	}
	conn.Close()
	return dsn
}

// storeArgs returns the flags that put a program on a fresh, private part
// of the shared store.
func storeArgs(t *testing.T, store string) []string {
	t.Helper()
	switch store {
	case "sqlite":
		return []string{"-store", "sqlite", "-sqlite-path", filepath.Join(t.TempDir(), "idem.db"), "-sqlite-table", "e2e_" + randomName()}
	case "dynamodb":
		u := reachable(t, "IDEM_TEST_DYNAMODB_URL", dynamoDefault)
		table := "e2e_" + randomName()
		t.Cleanup(func() { deleteDynamoTable(t, u, table) })
		return []string{"-store", "dynamodb", "-dynamodb-url", u, "-dynamodb-table", table}
	case "redis":
		u := reachable(t, "IDEM_TEST_REDIS_URL", redisDefault)
		prefix := "e2e-" + randomName() + ":"
		t.Cleanup(func() { deleteRedisPrefix(t, u, prefix) })
		return []string{"-store", "redis", "-redis-url", u, "-redis-prefix", prefix}
	case "mysql":
		dsn := reachableMySQL(t)
		table := "e2e_" + randomName()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if db, err := sql.Open("mysql", dsn); err == nil {
				for _, t := range []string{table + "_payments", table + "_orders", table + "_floor", table} { // the orders examples' and the floor's tables too
					db.ExecContext(ctx, "DROP TABLE IF EXISTS `"+t+"`")
				}
				db.Close()
			}
		})
		return []string{"-store", "mysql", "-mysql-dsn", dsn, "-mysql-table", table}
	default:
		u := reachable(t, "IDEM_TEST_POSTGRES_URL", postgresDefault)
		table := "e2e_" + randomName()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if conn, err := pgx.Connect(ctx, u); err == nil {
				for _, t := range []string{table + "_payments", table + "_orders", table + "_floor", table} { // the orders examples' and the floor's tables too
					conn.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{t}.Sanitize())
				}
				conn.Close(ctx)
			}
		})
		return []string{"-store", "postgres", "-postgres-url", u, "-pg-table", table}
	}
}

func TestSharedStores(t *testing.T) {
	t.Parallel() // it mostly waits (leases, timeouts): with the others at once
	for _, store := range []string{"redis", "postgres", "mysql", "dynamodb"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel() // each store's kill test waits out a lease
			t.Run("orders examples", func(t *testing.T) {
				for _, ex := range []string{"chi", "gin", "echo", "echov5", "nethttp", "fiber"} {
					checkOrders(t, start(t, ex, storeArgs(t, store)...))
				}
			})
			t.Run("retry on another process is replayed", func(t *testing.T) {
				// Gin, Echo and Fiber write the template alike ("/items/:id"),
				// so a key is one scope on all three.
				args := storeArgs(t, store)
				a := start(t, "fixture", append([]string{"-framework", "gin"}, args...)...)
				b := start(t, "fixture", append([]string{"-framework", "echo"}, args...)...)
				c := start(t, "fixture", append([]string{"-framework", "fiber"}, args...)...)
				first := call(t, "POST", a.url+"/items/7", "shared", "")
				retry := call(t, "POST", b.url+"/items/7", "shared", "")
				if first.code != 201 || retry.code != 201 || !retry.replayed() || retry.body != "item:7" {
					t.Errorf("first %d, retry on the other %d %q replayed=%v", first.code, retry.code, retry.body, retry.replayed())
				}
				hdr := []string{"Authorization", "Bearer alice"} // another namespace: another key
				if r := call(t, "POST", c.url+"/items/7", "shared", ""); r.code != 201 || !r.replayed() || r.body != "item:7" {
					t.Errorf("retry on Fiber: %d %q replayed=%v", r.code, r.body, r.replayed())
				}
				first = call(t, "POST", c.url+"/items/8", "fiber-first", "", hdr...)
				retry = call(t, "POST", a.url+"/items/8", "fiber-first", "", hdr...)
				if first.code != 201 || first.replayed() || retry.code != 201 || !retry.replayed() || retry.body != "item:8" {
					t.Errorf("first on Fiber %d, retry on Gin %d %q replayed=%v", first.code, retry.code, retry.body, retry.replayed())
				}
				if r := call(t, "POST", c.url+"/items/8", "fiber-first", ""); r.code != 201 || r.replayed() {
					t.Errorf("the key in the global namespace on Fiber: %d replayed=%v, want a new run", r.code, r.replayed())
				}
				if n := counter(t, a) + counter(t, b) + counter(t, c); n != 3 {
					t.Errorf("handler ran %d+%d+%d times, want 3", counter(t, a), counter(t, b), counter(t, c))
				}
			})
			t.Run("20 concurrent duplicates over two processes run once", func(t *testing.T) {
				args := storeArgs(t, store)
				procs := []*proc{start(t, "fixture", args...), start(t, "fixture", args...)}
				var wg sync.WaitGroup
				codes := make([]int, 20)
				for i := range codes {
					wg.Go(func() {
						codes[i] = call(t, "POST", procs[i%2].url+"/slow?ms=300", "dup", "").code
					})
				}
				wg.Wait()
				if n := counter(t, procs[0]) + counter(t, procs[1]); n != 1 {
					t.Errorf("handler ran %d times over both processes, want 1 (codes %v)", n, codes)
				}
				for _, c := range codes {
					if c != 200 && c != 409 {
						t.Errorf("codes %v: want only 200 and 409", codes)
						break
					}
				}
			})
			t.Run("a waiter on another process is woken and replays", func(t *testing.T) {
				args := append(storeArgs(t, store), "-on-conflict", "wait", "-wait-timeout", "20s")
				a := start(t, "fixture", args...)
				b := start(t, "fixture", args...)
				first := make(chan result, 1)
				go func() { first <- call(t, "POST", a.url+"/slow?ms=1500", "w", "") }()
				deadline := time.Now().Add(10 * time.Second)
				for counter(t, a) == 0 {
					if time.Now().After(deadline) {
						t.Fatal("the first request never reached the handler")
					}
					time.Sleep(10 * time.Millisecond)
				}
				r := call(t, "POST", b.url+"/slow?ms=1500", "w", "")
				if r.code != 200 || !r.replayed() || r.body != "slept:1500" {
					t.Errorf("waiter on the other process: %d replayed=%v %q", r.code, r.replayed(), r.body)
				}
				if f := <-first; f.code != 200 || f.replayed() {
					t.Errorf("first: %d replayed=%v", f.code, f.replayed())
				}
				if n := counter(t, b); n != 0 {
					t.Errorf("the waiter ran the handler %d times", n)
				}
			})
			t.Run("a process killed mid-request frees its key within the lease", func(t *testing.T) {
				// Default settings: a 15 s lease kept alive by the heartbeat.
				args := storeArgs(t, store)
				a := start(t, "fixture", args...)
				b := start(t, "fixture", args...)
				go func() {
					req, _ := http.NewRequest("POST", a.url+"/slow?ms=1000", nil)
					req.Header.Set("Idempotency-Key", "doomed")
					if resp, err := client.Do(req); err == nil {
						resp.Body.Close()
					}
				}()
				deadline := time.Now().Add(10 * time.Second)
				for counter(t, a) == 0 {
					if time.Now().After(deadline) {
						t.Fatal("the first request never reached the handler")
					}
					time.Sleep(10 * time.Millisecond)
				}
				a.cmd.Process.Signal(syscall.SIGKILL)
				a.cmd.Wait()
				killed := time.Now()
				// A client honouring Retry-After retries on the survivor until
				// the dead claim's lease ends and its retry runs.
				conflicts := 0
				for {
					r := call(t, "POST", b.url+"/slow?ms=1000", "doomed", "")
					if r.code == 200 {
						break
					}
					if r.code != 409 || r.header.Get("Retry-After") != "1" {
						t.Fatalf("retry while the dead claim's lease runs: %d Retry-After %q, want 409 and 1", r.code, r.header.Get("Retry-After"))
					}
					conflicts++
					if time.Since(killed) > 40*time.Second {
						t.Fatalf("still 409 %v after the kill; the lease is 15 s", time.Since(killed))
					}
					time.Sleep(time.Second)
				}
				took := time.Since(killed)
				t.Logf("kill -9 to a successful retry: %v (%d conflicts, the retry's own handler 1s)", took.Round(100*time.Millisecond), conflicts)
				if n := counter(t, b); n != 1 {
					t.Errorf("the survivor ran the handler %d times, want 1", n)
				}
				if took < time.Second || conflicts == 0 {
					t.Errorf("the dead claim did not block at all (%v, %d conflicts)", took, conflicts)
				}
			})
		})
	}
}

// TestExactlyOnce runs the fixture in exactly-once mode on the stores that
// have it: two processes share the store, a retry on the other process is
// replayed, concurrent duplicates run once, and a 5xx releases the key;
// a third, on Fiber, replays too and releases its own 5xx.
func TestExactlyOnce(t *testing.T) {
	t.Parallel() // it mostly waits (leases, timeouts): with the others at once
	for _, store := range []string{"postgres", "mysql", "sqlite", "dynamodb"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			args := append(storeArgs(t, store), "-exactly-once")
			a := start(t, "fixture", append([]string{"-framework", "chi"}, args...)...)
			b := start(t, "fixture", append([]string{"-framework", "gin"}, args...)...)
			f := start(t, "fixture", append([]string{"-framework", "fiber"}, args...)...)
			first := call(t, "POST", a.url+"/echo", "eo-1", "hello", "Content-Type", "text/plain")
			retry := call(t, "POST", b.url+"/echo", "eo-1", "hello", "Content-Type", "text/plain")
			if first.code != 201 || first.replayed() || retry.code != 201 || !retry.replayed() || retry.body != "hello" {
				t.Errorf("first %d %q, retry on the other %d %q replayed=%v", first.code, first.body, retry.code, retry.body, retry.replayed())
			}
			if r := call(t, "POST", a.url+"/echo", "eo-1", "other"); r.code != 422 {
				t.Errorf("other body: %d", r.code)
			}
			var wg sync.WaitGroup
			codes := make([]int, 10)
			for i := range codes {
				wg.Go(func() { codes[i] = call(t, "POST", []*proc{a, b}[i%2].url+"/slow?ms=300", "eo-dup", "").code })
			}
			wg.Wait()
			for _, c := range codes {
				if c != 200 && c != 409 {
					t.Errorf("codes %v: want only 200 and 409", codes)
					break
				}
			}
			for range 2 {
				if r := call(t, "POST", b.url+"/status/503", "eo-5xx", ""); r.code != 503 || r.replayed() {
					t.Errorf("5xx: %d replayed=%v", r.code, r.replayed())
				}
			}
			// echo once, slow once over both, 503 twice (released each time).
			if n := counter(t, a) + counter(t, b); n != 4 {
				t.Errorf("handlers ran %d times over both processes, want 4", n)
			}
			// Fiber: "/echo" is the same template on every router, and
			// "/items/:id" the same as Gin's, so retries cross over.
			if r := call(t, "POST", f.url+"/echo", "eo-1", "hello", "Content-Type", "text/plain"); r.code != 201 || !r.replayed() || r.body != "hello" {
				t.Errorf("retry on Fiber: %d %q replayed=%v", r.code, r.body, r.replayed())
			}
			for range 2 {
				if r := call(t, "POST", f.url+"/status/503", "eo-fiber-5xx", ""); r.code != 503 || r.replayed() {
					t.Errorf("5xx on Fiber: %d replayed=%v", r.code, r.replayed())
				}
			}
			if r := call(t, "POST", f.url+"/items/1", "eo-fiber", ""); r.code != 201 || r.replayed() {
				t.Errorf("first on Fiber: %d replayed=%v", r.code, r.replayed())
			}
			if r := call(t, "POST", b.url+"/items/1", "eo-fiber", ""); r.code != 201 || !r.replayed() || r.body != "item:1" {
				t.Errorf("retry on Gin of a Fiber response: %d %q replayed=%v", r.code, r.body, r.replayed())
			}
			if n := counter(t, f); n != 3 {
				t.Errorf("handlers ran %d times on Fiber, want 3 (503 twice, /items/1 once)", n)
			}
			for _, p := range []*proc{a, b, f} {
				if code := p.stop(t); code != 0 {
					t.Errorf("exit code %d after SIGTERM", code)
				}
			}
		})
	}
}

// deleteRedisPrefix deletes every key under prefix, so tests leave
// nothing behind.
func deleteRedisPrefix(t *testing.T, rawURL, prefix string) {
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		t.Errorf("cleaning up %s*: %v", prefix, err)
		return
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		c.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("cleaning up %s*: %v", prefix, err)
	}
}

// TestUnreachableStoreStopsAtStartup: every shared store behaves alike at
// start-up when its server does not answer: the program exits with status
// 1 and says which flag to fix (a store lost later answers 503 instead).
func TestUnreachableStoreStopsAtStartup(t *testing.T) {
	for _, args := range [][]string{
		{"-store", "redis", "-redis-url", "redis://127.0.0.1:1/0"},
		{"-store", "postgres", "-postgres-url", "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"},
		{"-store", "mysql", "-mysql-dsn", "root@tcp(127.0.0.1:1)/test?timeout=2s"},
	} {
		t.Run(args[1], func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(filepath.Join(bin, "chi"), append([]string{"-addr", "127.0.0.1:0"}, args...)...)
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != 1 || !strings.Contains(string(out), "error: "+args[2]) {
				t.Errorf("%q: exit %d, output %q; want 1 and an error naming %s", args, code, out, args[2])
			}
		})
	}
}
