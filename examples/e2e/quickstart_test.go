package e2e

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestQuickstartImportsLittle keeps README's first command quick to build
// on a fresh machine: the quick start compiles Chi, idem's core and the
// memory store, and no other module (no database driver, no telemetry).
func TestQuickstartImportsLittle(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "github.com/idemkit/idem/examples/quickstart").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/go-chi/chi/v5":              true,
		"github.com/idemkit/idem/core":          true,
		"github.com/idemkit/idem/adapters/chi":  true,
		"github.com/idemkit/idem/stores/memory": true,
		"github.com/idemkit/idem/examples":      true,
	}
	for _, m := range strings.Fields(string(out)) {
		if !allowed[m] {
			t.Errorf("the quick start depends on module %s; keep it to Chi, core and the memory store", m)
		}
	}
}

// TestQuickstartLogsEachRequest: the quick start prints one info line per
// request idem handles, an execution and a replay alike, and names its
// routes and a curl command in -h.
func TestQuickstartLogsEachRequest(t *testing.T) {
	cmd := exec.Command(filepath.Join(bin, "quickstart"), "-addr", "127.0.0.1:0")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd}
	t.Cleanup(func() { p.kill() })
	line := make([]byte, 200)
	n, _ := out.Read(line)
	u, ok := strings.CutPrefix(strings.TrimSpace(string(line[:n])), "listening on ")
	if !ok {
		t.Fatalf("first line %q", line[:n])
	}
	key := "q-" + randomName()
	call(t, "POST", u+"/orders", key, `{"item":"book","quantity":2}`)
	call(t, "POST", u+"/orders", key, `{"item":"book","quantity":2}`)
	if code := p.stop(t); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
	logs := stderr.String()
	for _, want := range []string{"INFO idempotency outcome=executed", "INFO idempotency outcome=replayed"} {
		if strings.Count(logs, want) != 1 {
			t.Errorf("want one %q line, log:\n%s", want, logs)
		}
	}

	help, _ := exec.Command(filepath.Join(bin, "quickstart"), "-h").CombinedOutput()
	for _, want := range []string{"POST /orders", "curl -i -X POST", "Idempotency-Key", "-addr"} {
		if !bytes.Contains(help, []byte(want)) {
			t.Errorf("-h lacks %q:\n%s", want, help)
		}
	}
}

// syncBuffer is a bytes.Buffer written by a process's stderr copier and
// read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
