package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyFile writes an -encryption-keys file with the given IDs, each with a
// fresh random key (or the one given in known), and returns its path and
// the lines.
func keyFile(t *testing.T, known map[string]string, ids ...string) string {
	t.Helper()
	var lines []string
	for _, id := range ids {
		line, ok := known[id]
		if !ok {
			b := make([]byte, 32)
			rand.Read(b)
			line = id + ":" + base64.StdEncoding.EncodeToString(b)
			known[id] = line
		}
		lines = append(lines, line)
	}
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("# test keys\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFixtureEncryption drives -encryption-keys over a real socket, on
// Redis, whose keys it then reads directly: the stored bytes hold nothing
// of the request or the response, a retry replays, a rotated ring (old
// key kept) still replays on Fiber, and a ring without the old key gets
// 500 record-unreadable and runs nothing.
func TestFixtureEncryption(t *testing.T) {
	t.Parallel()
	stores := storeArgs(t, "redis")
	known := map[string]string{}
	p := start(t, "fixture", append([]string{"-framework", "chi", "-encryption-keys", keyFile(t, known, "k1")}, stores...)...)
	key := "enc-" + randomName()
	const secret = `{"card":"4242424242424242","holder":"Ada Lovelace"}`
	first := call(t, "POST", p.url+"/echo", key, secret, "Content-Type", "application/json")
	again := call(t, "POST", p.url+"/echo", key, secret, "Content-Type", "application/json")
	if first.code != 201 || first.body != secret || !again.replayed() || again.body != secret {
		t.Fatalf("first %d %q, retry %d %q replayed=%v", first.code, first.body, again.code, again.body, again.replayed())
	}

	// Read every key of the fixture's prefix straight from Redis.
	u := reachable(t, "IDEM_TEST_REDIS_URL", redisDefault)
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := stores[len(stores)-1]
	var raw []byte
	iter := rc.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if v, err := rc.Get(ctx, iter.Val()).Bytes(); err == nil {
			raw = append(raw, v...)
		}
	}
	if len(raw) == 0 {
		t.Fatalf("no record under %s*", prefix)
	}
	for _, s := range []string{"4242424242424242", "Ada Lovelace", "application/json"} {
		if strings.Contains(string(raw), s) {
			t.Errorf("Redis holds %q in the clear", s)
		}
	}
	p.stop(t)

	rotated := start(t, "fixture", append([]string{"-framework", "fiber", "-encryption-keys", keyFile(t, known, "k1", "k2")}, stores...)...)
	if r := call(t, "POST", rotated.url+"/echo", key, secret, "Content-Type", "application/json"); !r.replayed() || r.body != secret {
		t.Errorf("after a rotation, on Fiber: %d %q replayed=%v", r.code, r.body, r.replayed())
	}
	rotated.stop(t)

	without := start(t, "fixture", append([]string{"-framework", "gin", "-encryption-keys", keyFile(t, known, "k2")}, stores...)...)
	if r := call(t, "POST", without.url+"/echo", key, secret, "Content-Type", "application/json"); r.code != 500 || !strings.Contains(r.body, "record-unreadable") {
		t.Errorf("without the old key: %d %q, want 500 record-unreadable", r.code, r.body)
	}
	if n := counter(t, without); n != 0 {
		t.Errorf("the handler ran %d times without the old key, want 0", n)
	}
}

// A bad key file stops the program with status 2 and says what is wrong.
func TestFixtureBadKeyFile(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"short":   "k1:" + base64.StdEncoding.EncodeToString([]byte("short")) + "\n",
		"nocolon": "k1\n",
		"empty":   "# nothing\n",
	} {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(content), 0o600)
		for _, args := range [][]string{{"-encryption-keys", path}, {"-encryption-keys", filepath.Join(dir, "missing")}} {
			cmd := exec.Command(filepath.Join(bin, "fixture"), args...)
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "-encryption-keys") {
				t.Errorf("%s %q: exit %d, output %q; want 2 and a message naming the flag", name, args, code, out)
			}
		}
	}
}
