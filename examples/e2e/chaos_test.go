package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chaosShort is how long each store's run of examples/chaos sends
// requests and injects faults in the short form; the five runs go in
// parallel and take about this plus a second or two.
const chaosShort = 8 * time.Second

// TestChaos runs examples/chaos, the randomized fault test, on each
// shared store: three fixture instances (one with its clock 20 s ahead,
// one 20 s behind), clients retrying with idemclient, and at random kill
// -9 and restart, SIGSTOP past the lease, store stalls, cuts and
// partitions. It fails with the program's output when a check fails: a
// request that did not succeed, answers for one key that disagree, a key
// run twice without an instance that held it dying or stopping (in
// exactly-once mode: any key with more than one committed row).
//
// The short form runs each store for 8 s, the five at once. For a longer
// run set IDEM_CHAOS_DURATION (a Go duration, per store) and raise the
// test timeout; IDEM_CHAOS_ARGS adds flags to every run (see go doc
// ./examples/chaos):
//
//	IDEM_CHAOS_DURATION=5m IDEM_CHAOS_ARGS='-instances 5 -workers 16' \
//	  go test -run TestChaos -timeout 30m -v ./e2e
//
// It is not parallel with the other tests: its leases are short (2 s),
// and a machine busy with other tests would make its timing harsher than
// intended.
func TestChaos(t *testing.T) {
	duration := chaosShort
	if v := os.Getenv("IDEM_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("IDEM_CHAOS_DURATION=%q: want a positive Go duration such as 5m", v)
		}
		duration = d
	}
	extra := strings.Fields(os.Getenv("IDEM_CHAOS_ARGS"))
	for _, tc := range []struct {
		name  string
		store string
		args  []string
	}{
		{"redis", "redis", nil},
		{"postgres", "postgres", nil},
		{"postgres exactly-once", "postgres", []string{"-exactly-once"}},
		{"mysql", "mysql", nil},
		{"mysql exactly-once", "mysql", []string{"-exactly-once"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var args []string
			switch tc.store {
			case "redis":
				args = []string{"-store", "redis", "-redis-url", reachable(t, "IDEM_TEST_REDIS_URL", redisDefault)}
			case "postgres":
				args = []string{"-store", "postgres", "-postgres-url", reachable(t, "IDEM_TEST_POSTGRES_URL", postgresDefault)}
			case "mysql":
				args = []string{"-store", "mysql", "-mysql-dsn", reachableMySQL(t)}
			}
			args = append(args, tc.args...)
			args = append(args, "-fixture", filepath.Join(bin, "fixture"), "-duration", duration.String(), "-fault-every", "500ms")
			args = append(args, extra...)
			ctx, cancel := context.WithTimeout(t.Context(), duration+3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "chaos"), args...)
			cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) } // it stops its instances, then exits
			cmd.WaitDelay = 30 * time.Second
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			began := time.Now()
			err := cmd.Run()
			if err != nil {
				t.Fatalf("chaos %s: %v after %v\n%s", strings.Join(args, " "), err, time.Since(began).Round(time.Second), out.String())
			}
			if !strings.Contains(out.String(), "\nPASS\n") {
				t.Fatalf("chaos exited 0 without PASS:\n%s", out.String())
			}
			t.Logf("chaos %s (%v):\n%s", tc.name, time.Since(began).Round(100*time.Millisecond), out.String())
		})
	}
}
