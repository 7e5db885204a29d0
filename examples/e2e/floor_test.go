package e2e

import (
	"context"
	"database/sql"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// TestFloor runs the fixture's -floor server beside the fixture with idem
// on each store, through loadgen -compare with replays: every answer is
// the route's 201, loadgen reports both servers, and the floor made its
// round trip in the store (its rows or keys are there).
func TestFloor(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"memory", "redis", "postgres", "mysql"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			args := []string{"-store", "memory"}
			if store != "memory" {
				args = storeArgs(t, store)
			}
			args = append(args, "-store-timeout", "10s") // a loaded CI machine answers slowly, not wrongly
			floor := start(t, "fixture", append([]string{"-floor"}, args...)...)
			idem := start(t, "fixture", append([]string{"-framework", "nethttp"}, args...)...)
			out, err := exec.Command(filepath.Join(bin, "loadgen"), "-compare", floor.url+"/echo,"+idem.url+"/echo",
				"-rounds", "2", "-duration", "300ms", "-concurrency", "4", "-keys", "replay80").CombinedOutput()
			if err != nil {
				t.Fatalf("loadgen -compare: %v: %s", err, out)
			}
			rounds := regexp.MustCompile(`(?m)^round \d .*errors 0, statuses map\[201:\d+\]$`).FindAllString(string(out), -1)
			medians := regexp.MustCompile(`(?m)^median http://\S+: \d+ req/s, \d+\.\d\d× the first`).FindAllString(string(out), -1)
			if len(rounds) != 4 || len(medians) != 2 {
				t.Fatalf("loadgen -compare printed %d clean rounds and %d medians, want 4 and 2:\n%s", len(rounds), len(medians), out)
			}
			if n := floorWrites(t, store, args); store != "memory" && n == 0 {
				t.Errorf("the floor wrote nothing in %s", store)
			}
		})
	}
	t.Run("refuses idem's modes", func(t *testing.T) {
		cmd := exec.Command(filepath.Join(bin, "fixture"), "-floor", "-store", "postgres", "-exactly-once")
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "-floor serves through net/http without idem") {
			t.Errorf("fixture -floor -exactly-once: exit %d: %s", code, out)
		}
	})
}

// floorWrites counts what the floor wrote in store: its table's rows, or
// its Redis keys.
func floorWrites(t *testing.T, store string, args []string) int {
	t.Helper()
	flag := func(name string) string { return args[slices.Index(args, name)+1] }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	var err error
	switch store {
	case "redis":
		opt, perr := redis.ParseURL(flag("-redis-url"))
		if perr != nil {
			t.Fatal(perr)
		}
		c := redis.NewClient(opt)
		defer c.Close()
		keys, serr := c.Keys(ctx, flag("-redis-prefix")+"floor:*").Result()
		n, err = len(keys), serr
	case "postgres":
		conn, cerr := pgx.Connect(ctx, flag("-postgres-url"))
		if cerr != nil {
			t.Fatal(cerr)
		}
		defer conn.Close(ctx)
		err = conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{flag("-pg-table") + "_floor"}.Sanitize()).Scan(&n)
	case "mysql":
		db, oerr := sql.Open("mysql", flag("-mysql-dsn"))
		if oerr != nil {
			t.Fatal(oerr)
		}
		defer db.Close()
		err = db.QueryRowContext(ctx, "SELECT count(*) FROM `"+flag("-mysql-table")+"_floor`").Scan(&n)
	}
	if err != nil {
		t.Fatalf("counting the floor's writes in %s: %v", store, err)
	}
	return n
}
