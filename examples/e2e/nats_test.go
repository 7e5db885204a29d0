package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

const natsDefault = "nats://127.0.0.1:4222"

// TestNatsConsumer runs examples/natsconsumer against the real NATS
// server, on PostgreSQL in exactly-once mode and on Redis, and counts the
// side effects (rows in the payments table) after redeliveries, a kill
// and deliberate duplicates.
func TestNatsConsumer(t *testing.T) {
	t.Parallel() // it mostly waits (leases, timeouts): with the others at once
	for _, store := range []string{"postgres", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			t.Run("a redelivery after a lost ack is replayed", func(t *testing.T) {
				e := newNatsEnv(t, store, 0)
				c := e.start(t, "-ack-wait", "1s", "-drop-acks", "3")
				for i := range 5 {
					e.publish(t, fmt.Sprintf("lost-%d", i), payment(i))
				}
				e.drain(t, c)
				e.wantPayments(t, 5)
				dropped, replayed := c.count("action=\"ack dropped"), c.count("replayed=true", "action=ack")
				t.Logf("%d acks dropped, %d redeliveries replayed and acked", dropped, replayed)
				if dropped != 3 || replayed < 3 {
					t.Errorf("%d acks dropped, %d replays; want 3 and at least 3", dropped, replayed)
				}
				if code := c.stop(t); code != 0 {
					t.Errorf("exit code %d after SIGTERM", code)
				}
			})
			t.Run("SIGTERM finishes the message in hand", func(t *testing.T) {
				e := newNatsEnv(t, store, 0)
				c := e.start(t, "-work-delay", "1s")
				e.publish(t, "term-1", payment(1))
				waitFor(t, "the message's claim", func() bool { return e.records(t) == 1 }) // in its work delay
				if code := c.stop(t); code != 0 {
					t.Errorf("exit code %d after SIGTERM", code)
				}
				e.wantPayments(t, 1)
				if n := c.count("outcome=paid", "action=ack"); n != 1 {
					t.Errorf("%d messages paid and acked before the exit, want 1", n)
				}
				if info := e.info(t); info.NumAckPending != 0 || info.NumPending != 0 {
					t.Errorf("after the exit: %d ack pending, %d pending; the ack was not sent", info.NumAckPending, info.NumPending)
				}
			})
			t.Run("a consumer killed mid-message and restarted", func(t *testing.T) {
				e := newNatsEnv(t, store, 0)
				args := []string{"-ack-wait", "3s", "-lease", "3s", "-work-delay", "1s"}
				a := e.start(t, args...)
				for i := range 4 {
					e.publish(t, fmt.Sprintf("kill-%d", i), payment(i))
				}
				// Two messages done, the third claimed and in its work delay.
				waitFor(t, "the third claim", func() bool { return e.records(t) == 3 })
				a.cmd.Process.Signal(syscall.SIGKILL)
				a.cmd.Wait()
				before := e.payments(t)
				if before != 2 {
					t.Errorf("%d payments when killed, want 2", before)
				}
				b := e.start(t, args...)
				e.drain(t, b)
				e.wantPayments(t, 4)
				t.Logf("killed with %d payments made; the restarted consumer made %d, replayed %d, Nak'ed %d deliveries while the dead claim held",
					before, b.count("outcome=paid", "replayed=false"), b.count("replayed=true"), b.count("outcome=retry"))
				if n := b.count("outcome=paid", "replayed=false"); before+n != 4 {
					t.Errorf("%d payments before the kill and %d after; want 4 in all", before, n)
				}
			})
			t.Run("a crash between the INSERT and the record", func(t *testing.T) {
				e := newNatsEnv(t, store, 0)
				args := []string{"-ack-wait", "2s", "-lease", "2s"}
				a := e.start(t, append(args, "-crash-after-insert")...)
				e.publish(t, "crash-1", payment(1))
				e.publish(t, "crash-2", payment(2))
				a.cmd.Wait()
				if ws, ok := a.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("the consumer exited with %v, want killed by SIGKILL", a.cmd.ProcessState)
				}
				before := e.payments(t)
				b := e.start(t, args...)
				e.drain(t, b)
				rows, keys := e.countPayments(t)
				t.Logf("%d payment rows right after the crash; %d rows for %d keys after the restart", before, rows, keys)
				if store == "postgres" {
					// Exactly-once: the row rolled back with the record's
					// transaction, and the redelivery made it once.
					if before != 0 || rows != 2 || keys != 2 {
						t.Errorf("exactly-once: %d rows after the crash, %d for %d keys after; want 0, then 2 for 2", before, rows, keys)
					}
					return
				}
				// Redis: the INSERT and the record are two writes, and a
				// crash between them repeats the payment. This pins the
				// limit the example documents.
				if before != 1 || rows != 3 || keys != 2 {
					t.Errorf("redis: %d rows after the crash, %d for %d keys after; want 1, then 3 for 2", before, rows, keys)
				}
			})
			t.Run("1000 messages with duplicates make 1000 payments", func(t *testing.T) {
				const window = 100 * time.Millisecond
				e := newNatsEnv(t, store, window)
				c := e.start(t, "-ack-wait", "2s", "-drop-acks", "10")
				// The first ten carry no Msg-Id (key: stream and sequence);
				// their acks are dropped, so their redeliveries are replays.
				for i := range 10 {
					e.publish(t, "", payment(i))
				}
				jsDropped := 0
				for i := 10; i < 1000; i++ {
					e.publish(t, fmt.Sprintf("pay-%d", i), payment(i))
					if i%50 == 0 { // within the window: JetStream drops it
						if e.publish(t, fmt.Sprintf("pay-%d", i), payment(i)).Duplicate {
							jsDropped++
						}
					}
				}
				time.Sleep(10 * window)
				stored := 0
				for i := 10; i < 1000; i += 6 { // after the window: JetStream stores them
					if !e.publish(t, fmt.Sprintf("pay-%d", i), payment(i)).Duplicate {
						stored++
					}
				}
				if stored == 0 {
					t.Fatal("JetStream dropped every late duplicate; the test checks nothing")
				}
				e.publish(t, "pay-500", payment(9999)) // same Msg-Id, another payload
				e.drain(t, c)
				e.wantPayments(t, 1000)
				replays := c.count("replayed=true", "action=ack")
				t.Logf("%d duplicates dropped by JetStream, %d stored and delivered; %d replays acked (the stored duplicates and the redeliveries after 10 dropped acks)",
					jsDropped, stored, replays)
				if replays < stored+10 {
					t.Errorf("%d replays, want at least %d", replays, stored+10)
				}
				if n := c.count("outcome=mismatch", "action=term"); n != 1 {
					t.Errorf("%d mismatches terminated, want 1", n)
				}
			})
		})
	}
}

func TestNatsConsumerBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-store", "redis", "-exactly-once"},
		{"-ack-wait", "10ms"},
		{"-store", "mongo"},
		{"extra"},
	} {
		cmd := exec.Command(filepath.Join(bin, "natsconsumer"), args...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 || len(out) == 0 {
			t.Errorf("%q: exit %d, output %q; want 2 and a message", args, code, out)
		}
	}
}

func payment(i int) []byte {
	return fmt.Appendf(nil, `{"account":"acct-%d","amount_cents":%d}`, i%7, 100+i)
}

// natsEnv is one test's private stream, consumer name, payments table and
// store records, all removed when the test ends.
type natsEnv struct {
	js                        jetstream.JetStream
	stream, subject, consumer string
	pgURL, table              string
	args                      []string // the consumer's flags
	records                   func(t *testing.T) int
}

// newNatsEnv creates a stream with the duplicate window dup (0: the
// server's default) for a consumer on store: PostgreSQL in exactly-once
// mode, or Redis.
func newNatsEnv(t *testing.T, store string, dup time.Duration) *natsEnv {
	t.Helper()
	natsURL := reachable(t, "IDEM_TEST_NATS_URL", natsDefault)
	pgURL := reachable(t, "IDEM_TEST_POSTGRES_URL", postgresDefault)
	name := randomName()
	e := &natsEnv{
		stream:   "E2E_" + strings.ToUpper(name),
		subject:  "e2e.payments." + name,
		consumer: "e2e-" + name,
		pgURL:    pgURL,
		table:    "e2e_payments_" + name,
	}
	e.args = append(storeArgs(t, store), "-postgres-url", pgURL, "-nats-url", natsURL,
		"-stream", e.stream, "-subject", e.subject, "-consumer", e.consumer, "-payments-table", e.table)
	if store == "postgres" {
		e.args = append(e.args, "-exactly-once")
		records := "SELECT count(*) FROM " + pgx.Identifier{flagValue(e.args, "-pg-table")}.Sanitize()
		e.records = func(t *testing.T) int { return e.count(t, records) }
	} else {
		e.records = redisRecords(t, e.args)
	}
	t.Cleanup(func() { e.exec(t, "DROP TABLE IF EXISTS "+pgx.Identifier{e.table}.Sanitize()) })

	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if e.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: e.stream, Subjects: []string{e.subject}, Duplicates: dup, Storage: jetstream.MemoryStorage,
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.js.DeleteStream(ctx, e.stream); err != nil {
			t.Errorf("deleting stream %s: %v", e.stream, err)
		}
	})
	return e
}

// flagValue returns the value of the last flag name in args.
func flagValue(args []string, name string) string {
	v := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			v = args[i+1]
		}
	}
	return v
}

// redisRecords returns a function that counts the records under the
// -redis-prefix of args (storeArgs deletes them when the test ends).
func redisRecords(t *testing.T, args []string) func(*testing.T) int {
	opt, err := redis.ParseURL(flagValue(args, "-redis-url"))
	prefix := flagValue(args, "-redis-prefix")
	if err != nil || prefix == "" {
		t.Fatalf("no Redis URL and prefix in %q: %v", args, err)
	}
	client := redis.NewClient(opt)
	t.Cleanup(func() { client.Close() })
	return func(t *testing.T) int {
		t.Helper()
		keys, err := client.Keys(t.Context(), prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	}
}

func (e *natsEnv) exec(t *testing.T, sql string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.pgURL)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Error(err)
	}
}

// publish publishes data with the Msg-Id id ("" for none).
func (e *natsEnv) publish(t *testing.T, id string, data []byte) *jetstream.PubAck {
	t.Helper()
	var opts []jetstream.PublishOpt
	if id != "" {
		opts = append(opts, jetstream.WithMsgID(id))
	}
	ack, err := e.js.Publish(t.Context(), e.subject, data, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

func (e *natsEnv) info(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := e.js.Consumer(t.Context(), e.stream, e.consumer)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// drain waits until c has settled every message of the stream: none left
// to deliver, none delivered and not yet acked or terminated.
func (e *natsEnv) drain(t *testing.T, c *consumerProc) {
	t.Helper()
	waitFor(t, "the consumer to settle every message", func() bool {
		if c.cmd.ProcessState != nil {
			t.Fatalf("the consumer exited: %v", c.cmd.ProcessState)
		}
		info := e.info(t)
		return info.NumPending == 0 && info.NumAckPending == 0
	})
}

// payments counts the payment rows.
func (e *natsEnv) payments(t *testing.T) int {
	t.Helper()
	n, _ := e.countPayments(t)
	return n
}

// count runs a query for one number.
func (e *natsEnv) count(t *testing.T, sql string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), e.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *natsEnv) countPayments(t *testing.T) (rows, keys int) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), e.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	err = conn.QueryRow(t.Context(), "SELECT count(*), count(DISTINCT msg_key) FROM "+pgx.Identifier{e.table}.Sanitize()).Scan(&rows, &keys)
	if err != nil {
		t.Fatal(err)
	}
	return rows, keys
}

// wantPayments checks that there are n payment rows, one per message key.
func (e *natsEnv) wantPayments(t *testing.T, n int) {
	t.Helper()
	rows, keys := e.countPayments(t)
	t.Logf("%d payment rows for %d keys", rows, keys)
	if rows != n || keys != n {
		t.Errorf("%d payment rows for %d distinct keys, want %d for %d", rows, keys, n, n)
	}
}

// consumerProc is a running natsconsumer and the lines it logged.
type consumerProc struct {
	*proc
	mu    sync.Mutex
	lines []string
	part  []byte
}

// start runs natsconsumer on e with extra flags and waits for its
// start-up line.
func (e *natsEnv) start(t *testing.T, extra ...string) *consumerProc {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "natsconsumer"), append(append([]string{}, e.args...), extra...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &consumerProc{proc: &proc{cmd: cmd}}
	cmd.Stderr = c
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			c.mu.Lock()
			t.Logf("natsconsumer %q logged:\n%s", extra, strings.Join(c.lines[max(0, len(c.lines)-40):], "\n"))
			c.mu.Unlock()
		}
	})
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case first <- sc.Text():
			default:
				t.Errorf("natsconsumer printed more than one line to stdout: %q", sc.Text())
			}
		}
	}()
	select {
	case line := <-first:
		if !strings.HasPrefix(line, "consuming ") {
			t.Fatalf("natsconsumer: first line %q, want \"consuming ...\"", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("natsconsumer %q did not start consuming", extra)
	}
	return c
}

// Write collects the consumer's log lines (its stderr).
func (c *consumerProc) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.part = append(c.part, p...)
	for {
		i := strings.IndexByte(string(c.part), '\n')
		if i < 0 {
			return len(p), nil
		}
		c.lines = append(c.lines, string(c.part[:i]))
		c.part = c.part[i+1:]
	}
}

// count returns how many logged lines contain every one of subs.
func (c *consumerProc) count(subs ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
next:
	for _, l := range c.lines {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		n++
	}
	return n
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
