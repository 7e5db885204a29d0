package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The gRPC example (examples/grpc/server and examples/grpc/client) over
// real sockets: the client's calls with one key create one order, and
// every retry, in the same run or another, is a replay.

var (
	buildGRPC    sync.Once
	buildGRPCErr error
)

// grpcBinaries builds the gRPC server and client into bin, as
// grpc-server and grpc-client (their folders are both named after their
// role, so TestMain's one go build would name them server and client).
func grpcBinaries(t *testing.T) {
	t.Helper()
	buildGRPC.Do(func() {
		for name, pkg := range map[string]string{
			"grpc-server": "github.com/idemkit/idem/examples/grpc/server",
			"grpc-client": "github.com/idemkit/idem/examples/grpc/client",
		} {
			out, err := goBuild("-o", filepath.Join(bin, name), pkg).CombinedOutput()
			if err != nil {
				buildGRPCErr = fmt.Errorf("building %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildGRPCErr != nil {
		t.Fatal(buildGRPCErr)
	}
}

// grpcCall is one line of the client's output.
type grpcCall struct {
	order    string
	attempts int
	replayed bool
}

var (
	grpcCallLine  = regexp.MustCompile(`^call (\d+): order (\S+) \(.*\) key (\S+) attempts (\d+) replayed (true|false)$`)
	grpcCountLine = regexp.MustCompile(`^orders on the server: (\d+)$`)
)

// runGRPCClient runs the client against addr with args and returns its
// calls and the order count it printed.
func runGRPCClient(t *testing.T, addr string, args ...string) ([]grpcCall, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "grpc-client"), append([]string{"-addr", addr, "-timeout", "20s"}, args...)...)
	cmd.Stderr = &testWriter{t: t, prefix: "grpc-client: "}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("grpc-client %q: %v; stdout %q", args, err, out)
	}
	var calls []grpcCall
	count := -1
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		line = strings.TrimSpace(line)
		if m := grpcCallLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[4])
			calls = append(calls, grpcCall{order: m[2], attempts: n, replayed: m[5] == "true"})
		} else if m := grpcCountLine.FindStringSubmatch(line); m != nil {
			count, _ = strconv.Atoi(m[1])
		} else {
			t.Errorf("grpc-client: unexpected line %q", line)
		}
	}
	if count < 0 {
		t.Fatalf("grpc-client %q printed no order count: %q", args, out)
	}
	return calls, count
}

// TestGRPCExample runs the client twice with one key: one order, then a
// replay of it; and a third time with a new key: a second order.
func TestGRPCExample(t *testing.T) {
	grpcBinaries(t)
	p := start(t, "grpc-server")
	key := "grpc-" + randomName()
	first, n1 := runGRPCClient(t, p.url, "-key", key, "-n", "1")
	again, n2 := runGRPCClient(t, p.url, "-key", key, "-n", "1")
	if len(first) != 1 || len(again) != 1 {
		t.Fatalf("calls %v then %v, want one each", first, again)
	}
	if first[0].replayed || first[0].attempts != 1 || n1 != 1 {
		t.Errorf("first run: %+v, %d orders; want an execution and 1 order", first[0], n1)
	}
	if !again[0].replayed || again[0].order != first[0].order || n2 != 1 {
		t.Errorf("second run with the same key: %+v, %d orders; want a replay of %s and still 1 order", again[0], n2, first[0].order)
	}
	// One run with its default -n 2 and a new key: executed, then replayed.
	calls, n3 := runGRPCClient(t, p.url)
	if len(calls) != 2 || calls[0].replayed || !calls[1].replayed || calls[0].order == first[0].order || calls[1].order != calls[0].order || n3 != 2 {
		t.Errorf("a new key, two calls: %+v, %d orders; want a new order executed then replayed, 2 orders", calls, n3)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("server exit code %d after SIGTERM", code)
	}
}

// TestGRPCExampleLostAnswer loses the first answer after the server
// stored it: the client's interceptor retries with the same key and gets
// the replay, and the order exists once.
func TestGRPCExampleLostAnswer(t *testing.T) {
	grpcBinaries(t)
	p := start(t, "grpc-server", "-lose", "1")
	calls, n := runGRPCClient(t, p.url, "-n", "1")
	if len(calls) != 1 || calls[0].attempts != 2 || !calls[0].replayed || n != 1 {
		t.Errorf("%+v, %d orders; want 2 attempts ending in a replay, 1 order", calls, n)
	}
}

// TestGRPCExampleSharedStore restarts the server on the same shared
// store between two runs with one key: the second run is a replay,
// though the new process holds no order.
func TestGRPCExampleSharedStore(t *testing.T) {
	grpcBinaries(t)
	for _, store := range []string{"redis", "postgres"} {
		t.Run(store, func(t *testing.T) {
			args := storeArgs(t, store)
			key := "grpc-" + randomName()
			p := start(t, "grpc-server", args...)
			first, n1 := runGRPCClient(t, p.url, "-key", key, "-n", "1")
			p.stop(t)
			p = start(t, "grpc-server", args...)
			again, n2 := runGRPCClient(t, p.url, "-key", key, "-n", "1")
			if len(first) != 1 || len(again) != 1 || first[0].replayed || n1 != 1 ||
				!again[0].replayed || again[0].order != first[0].order || n2 != 0 {
				t.Errorf("before the restart %+v (%d orders), after %+v (%d orders); want an execution, then its replay from the store with no new order",
					first, n1, again, n2)
			}
		})
	}
}

// TestGRPCExampleFlags checks -h and bad flags.
func TestGRPCExampleFlags(t *testing.T) {
	grpcBinaries(t)
	for _, name := range []string{"grpc-server", "grpc-client"} {
		out, err := exec.Command(filepath.Join(bin, name), "-h").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "go run ./examples/grpc/server") || !strings.Contains(string(out), "go run ./examples/grpc/client -key") {
			t.Errorf("%s -h: %v: %s", name, err, out)
		}
	}
	for _, args := range [][]string{
		{"grpc-server", "-lose", "-1"},
		{"grpc-server", "-store", "mongo"},
		{"grpc-server", "-exactly-once"},
		{"grpc-server", "extra"},
		{"grpc-client", "-n", "0"},
		{"grpc-client", "-timeout", "0s"},
	} {
		cmd := exec.Command(filepath.Join(bin, args[0]), args[1:]...)
		cmd.Env = append(os.Environ(), "IDEM_REDIS_URL=redis://127.0.0.1:1/0")
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || len(out) == 0 {
			t.Errorf("%q: exit %d, output %q; want 2 and a message", args, code, out)
		}
	}
}
