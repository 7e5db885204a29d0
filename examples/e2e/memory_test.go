package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	memstore "github.com/idemkit/idem/stores/memory"
)

// TestMemoryFlood floods an engine on the memory store with 120,000 unique
// keys and 64 KiB responses (7.5 GiB in all) in a process of its own: the
// store keeps its byte budget (256 MiB), and with GOMEMLIMIT set to the
// budget plus 64 MiB the process's peak RSS stays under the budget plus
// 96 MiB. Without GOMEMLIMIT the Go collector lets the heap grow to about
// twice what is live, which the test logs.
func TestMemoryFlood(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "memflood")
	// Without -race (not goBuild): the race detector's shadow memory would
	// dwarf the resident size this test measures.
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/idemkit/idem/examples/internal/memflood").CombinedOutput(); err != nil {
		t.Fatalf("building memflood: %v\n%s", err, out)
	}
	run := func(env ...string) (records, bytes, peak int64) {
		t.Helper()
		cmd := exec.Command(exe, "-n", "120000", "-size", "65536")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("memflood %v: %v", env, err)
		}
		var rss int64
		if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "records=%d bytes=%d peak_rss=%d rss=%d", &records, &bytes, &peak, &rss); err != nil {
			t.Fatalf("memflood printed %q: %v", out, err)
		}
		return records, bytes, peak
	}
	const budget = memstore.DefaultMaxBytes
	records, bytes, peak := run(fmt.Sprintf("GOMEMLIMIT=%dMiB", (budget>>20)+64))
	t.Logf("GOMEMLIMIT=budget+64MiB: %d records, %d MiB stored, peak RSS %d MiB (budget %d MiB)", records, bytes>>20, peak>>20, budget>>20)
	if bytes > budget {
		t.Errorf("the store holds %d bytes, over its budget of %d", bytes, budget)
	}
	if peak > budget+96<<20 {
		t.Errorf("peak RSS %d MiB, over the budget plus 96 MiB", peak>>20)
	}
	_, _, peak = run("GOMEMLIMIT=off")
	t.Logf("without GOMEMLIMIT: peak RSS %d MiB (%.1fx the budget)", peak>>20, float64(peak)/budget)
}
