// Command chaos is idem's randomized fault test: several fixture
// instances (examples/fixture) on one shared store, clients retrying
// with idemclient, and faults injected at random. It checks that every
// request ends in success, that all answers for one key agree, and that no
// key runs twice except where an instance holding it was killed, stopped
// or cut off from the store past its lease (in exactly-once mode: never).
//
//	go build -o /tmp/idem/ ./examples/fixture ./examples/chaos
//	/tmp/idem/chaos -store postgres -exactly-once -duration 30s
//
// It starts -instances fixture processes (the binary given by -fixture,
// by default "fixture" beside this program) on -store, each behind its
// own TCP proxy to the store, with a short lease (-lease, 2s) so that
// takeovers happen within seconds, and rotating through the frameworks;
// with -clock-skew D the first instance's clock runs D ahead and the
// second's D behind, which the engine must correct by aligning with the
// store's clock. -workers workers then send logical requests, POST
// /pay, through idemclient, whose base transport sends each attempt to a
// random live instance; each key is sent by 1 to -dups concurrent
// requests. Meanwhile a fault is injected every -fault-every on average,
// on a random instance, of a random kind among -faults:
//
//	kill       kill -9, restarted on the same port after L/10 to L/2
//	stop       SIGSTOP for 1.25 to 2 times max(L, attempt timeout), then SIGCONT
//	stall      the instance's store proxy hangs for L/10 to L/4
//	cut        the instance's store connections are cut, new ones refused up to L/10
//	partition  the instance's store proxy hangs as long as a stop
//
// (L is the lease.) A fault that takes an instance away (kill, stop,
// partition) always leaves another untouched, an instance has one fault at
// a time, and after a stall or a cut it gets none for L/2, so that its
// heartbeat reaches the store between two short store faults. New requests start for
// -duration, or until -requests keys were sent; then the faults are
// undone, the requests in flight finish, and the instances are shut down
// with SIGTERM, so every execution is recorded. Every instance appends
// each execution of POST /pay to a file (-exec-log); in exactly-once mode
// each also writes a row through the request's transaction (-exec-table),
// so the rows are the executions that committed.
//
// It prints the faults with their times, then what it counted: requests,
// attempts by answer, replays, executions per key, keys run twice and
// whether each is excused, and exits with status 1 when a check fails:
//
//   - a request that did not end in success (201 with its key's execution)
//   - answers for one key that disagree, or an answer whose execution was
//     never recorded (in exactly-once mode: never committed)
//   - a key run twice without an excuse: in plain mode the excuse is an
//     instance that ran the key and was killed, stopped or partitioned
//     between the key's first handler start and its last execution; in
//     exactly-once mode there is none, and every key has exactly one row
//   - an instance that exited by itself or could not be restarted
//
// Answers that disagree are excused with the key's double run in plain
// mode. Everything it starts is stopped by process id at the end, also on
// failure or Ctrl-C (then it exits with status 1), and the store's tables
// or keys are dropped unless -keep.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// frameworks are rotated over the instances with -framework mixed.
var frameworks = []string{"chi", "gin", "echo", "nethttp", "echov5"}

type config struct {
	fixture        string
	store          string
	exactlyOnce    bool
	redisURL       string
	postgresURL    string
	mysqlDSN       string
	framework      string
	instances      int
	workers        int
	requests       int
	dups           int
	duration       time.Duration
	lease          time.Duration
	storeTimeout   time.Duration
	attemptTimeout time.Duration
	handler        time.Duration
	faultEvery     time.Duration
	faults         string
	kinds          []string
	clockSkew      time.Duration
	seed           uint64
	keep           bool
	logLevel       string
	maxAttempts    int
	budget         time.Duration
}

func parse(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.fixture, "fixture", "", `the fixture program (go build ./examples/fixture); default "fixture" beside this program`)
	fs.StringVar(&c.store, "store", "redis", "shared store: redis, postgres or mysql")
	fs.BoolVar(&c.exactlyOnce, "exactly-once", false, "exactly-once mode (postgres, mysql): every key must have exactly one committed execution")
	fs.StringVar(&c.redisURL, "redis-url", envOr("IDEM_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL (default $IDEM_REDIS_URL, else the local server)")
	fs.StringVar(&c.postgresURL, "postgres-url", envOr("IDEM_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL URL (default $IDEM_POSTGRES_URL, else the local server)")
	fs.StringVar(&c.mysqlDSN, "mysql-dsn", envOr("IDEM_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/test"), "MySQL DSN, go-sql-driver syntax (default $IDEM_MYSQL_DSN, else the local server)")
	fs.StringVar(&c.framework, "framework", "mixed", "the instances' router: gin, echo, echov5, chi, nethttp, or mixed (rotated)")
	fs.IntVar(&c.instances, "instances", 3, "fixture instances sharing the store (at least 2)")
	fs.IntVar(&c.workers, "workers", 8, "workers sending keys")
	fs.IntVar(&c.requests, "requests", 0, "keys to send at most; 0: as many as -duration allows")
	fs.IntVar(&c.dups, "dups", 3, "each key is sent by 1 to this many concurrent requests")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long new requests start and faults are injected")
	fs.DurationVar(&c.lease, "lease", 2*time.Second, "the instances' lease (heartbeat every third)")
	fs.DurationVar(&c.storeTimeout, "store-timeout", 500*time.Millisecond, "the instances' store timeout")
	fs.DurationVar(&c.attemptTimeout, "attempt-timeout", 0, "how long the client waits for an attempt's response headers (default: the lease)")
	fs.DurationVar(&c.handler, "handler", 100*time.Millisecond, "how long POST /pay takes; it records its execution half way")
	fs.DurationVar(&c.faultEvery, "fault-every", 700*time.Millisecond, "mean time between faults")
	fs.StringVar(&c.faults, "faults", strings.Join(faultKinds, ","), "kinds of fault, comma-separated: "+strings.Join(faultKinds, ", ")+"; \"none\" for none")
	fs.DurationVar(&c.clockSkew, "clock-skew", 20*time.Second, "the first instance's clock runs this far ahead, the second's this far behind; 0 for none")
	fs.Uint64Var(&c.seed, "seed", 0, "random seed (default: a random one, printed)")
	fs.BoolVar(&c.keep, "keep", false, "keep the store's tables or keys and the instances' logs")
	fs.StringVar(&c.logLevel, "log-level", "warn", "the instances' -log-level (their stderr goes to a file each)")
	fs.IntVar(&c.maxAttempts, "attempts", 50, "idemclient's attempts per request at most (in-progress 409s not counted)")
	fs.DurationVar(&c.budget, "budget", time.Minute, "idemclient's time budget per request")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.attemptTimeout == 0 {
		c.attemptTimeout = c.lease
	}
	if c.faults != "none" && c.faults != "" {
		for k := range strings.SplitSeq(c.faults, ",") {
			k = strings.TrimSpace(k)
			if !slices.Contains(faultKinds, k) {
				return nil, fmt.Errorf("-faults: unknown kind %q: want %s", k, strings.Join(faultKinds, ", "))
			}
			c.kinds = append(c.kinds, k)
		}
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	case c.store != "redis" && c.store != "postgres" && c.store != "mysql":
		return nil, fmt.Errorf("-store %q: want redis, postgres or mysql", c.store)
	case c.exactlyOnce && c.store == "redis":
		return nil, errors.New("-exactly-once needs -store postgres or mysql")
	case c.framework != "mixed" && !slices.Contains(frameworks, c.framework):
		return nil, fmt.Errorf("-framework %q: want mixed or one of %s", c.framework, strings.Join(frameworks, ", "))
	case c.instances < 2:
		return nil, errors.New("-instances must be at least 2")
	case c.workers < 1 || c.dups < 1 || c.requests < 0 || c.maxAttempts < 1:
		return nil, errors.New("-workers, -dups and -attempts must be at least 1, -requests not negative")
	case c.duration <= 0 || c.lease <= 0 || c.storeTimeout <= 0 || c.attemptTimeout <= 0 || c.faultEvery <= 0 || c.budget <= 0 || c.handler < 0:
		return nil, errors.New("-duration, -lease, -store-timeout, -attempt-timeout, -fault-every and -budget must be positive, -handler not negative")
	}
	if c.fixture == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("-fixture not given and this program's path unknown: %w", err)
		}
		c.fixture = filepath.Join(filepath.Dir(exe), "fixture")
	}
	if _, err := os.Stat(c.fixture); err != nil {
		return nil, fmt.Errorf("-fixture: %w (build it: go build -o DIR/ ./examples/fixture)", err)
	}
	return c, nil
}

func main() {
	c, err := parse(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, c, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stdout, "error:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
