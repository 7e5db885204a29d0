package mysqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
)

// The tests of idem issue 16, "never twice, in every configuration", on
// MySQL: each failed on the store before its fix.

// serverPacket returns the server's max_allowed_packet.
func serverPacket(t *testing.T, db *sql.DB) int {
	t.Helper()
	var p int
	if err := db.QueryRowContext(t.Context(), "SELECT @@max_allowed_packet").Scan(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

// bodyFor is the body a request for key answers with: n bytes that hold
// every byte value, in an order that depends on key. (Built by copying, so
// that 16 MiB take no time under the race detector.)
func bodyFor(key string, n int) []byte {
	var k byte
	for i := range len(key) {
		k = k*31 + key[i]
	}
	b := make([]byte, n)
	for i := range min(n, 256) {
		b[i] = byte(i) ^ k
	}
	for i := 256; i < n; i *= 2 {
		copy(b[i:], b[:i])
	}
	return b
}

// app is an engine in front of a handler that, in exactly-once mode,
// inserts one order per request through Tx (its ref is the idempotency
// key), holds its transaction for X-Hold, and answers 201 with a body of
// X-Size bytes (bodyFor).
type app struct {
	f          txFixture
	srv        *httptest.Server
	mu         sync.Mutex
	runs       map[string]int
	commitErrs atomic.Int32
	lastErr    atomic.Value
}

// orderIDs numbers the orders of every app, which may share a table.
var orderIDs atomic.Int64

func newApp(t *testing.T, f txFixture, st store.Store, opts ...idem.Option) *app {
	t.Helper()
	return newAppHTTP(t, f, st, nil, opts...)
}

// newAppHTTP is newApp with the middleware's HTTP options.
func newAppHTTP(t *testing.T, f txFixture, st store.Store, httpOpts []idem.HTTPOption, opts ...idem.Option) *app {
	t.Helper()
	a := &app{f: f, runs: map[string]int{}}
	opts = append([]idem.Option{
		idem.WithLogger(quietLog),
		idem.WithStoreObserver(func(_ context.Context, op idem.StoreOp, _ time.Duration, err error) {
			if op == idem.StoreCommit && err != nil {
				a.commitErrs.Add(1)
				a.lastErr.Store(err.Error())
			}
		}),
	}, opts...)
	e, err := idem.New(st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	a.srv = httptest.NewServer(e.Middleware(httpOpts...)(http.HandlerFunc(a.serve)))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *app) serve(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	a.mu.Lock()
	a.runs[key]++
	a.mu.Unlock()
	size, _ := strconv.Atoi(r.Header.Get("X-Size"))
	hold, _ := time.ParseDuration(r.Header.Get("X-Hold"))
	if Tx(r.Context()) != nil {
		if err := a.f.insert(r.Context(), int(orderIDs.Add(1)), key); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	time.Sleep(hold)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusCreated)
	w.Write(bodyFor(key, size))
}

type reply struct {
	code   int
	body   []byte
	header http.Header
	err    error
}

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }
func (r reply) omitted() bool  { return r.header.Get(idem.HeaderBodyOmitted) == "true" }

func (r reply) String() string {
	if r.err != nil {
		return r.err.Error()
	}
	s := fmt.Sprintf("%d, %d bytes", r.code, len(r.body))
	if r.replayed() {
		s += ", replayed"
	}
	if r.omitted() {
		s += ", body omitted"
	}
	if r.code >= 300 && len(r.body) < 512 {
		s += ": " + strings.TrimSpace(string(r.body))
	}
	return s
}

func (a *app) post(key string, size int, hold time.Duration) reply {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", a.srv.URL+"/orders", nil)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Size", strconv.Itoa(size))
	req.Header.Set("X-Hold", hold.String())
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, body: b, header: resp.Header, err: err}
}

// ranOnce fails the test unless the handler ran exactly once for key and,
// in exactly-once mode, its order committed exactly once.
func (a *app) ranOnce(t *testing.T, key string, orders bool) {
	t.Helper()
	a.mu.Lock()
	runs := a.runs[key]
	a.mu.Unlock()
	if runs != 1 {
		t.Errorf("key %s: the handler ran %d times, want once", key, runs)
	}
	if !orders {
		return
	}
	if n := a.f.ordersFor(t, key); n != 1 {
		t.Errorf("key %s: %d orders committed, want exactly one", key, n)
	}
}

// TestExactlyOnceSaturatedPool: as many connections as requests in
// flight, a short lease and handlers that span several heartbeats. The
// handlers' transactions hold every connection, so a heartbeat that needs
// one of its own never gets it; the claim must be kept without it, and
// every request commits once, with no failed commit.
func TestExactlyOnceSaturatedPool(t *testing.T) {
	const inFlight = 4
	f := newTxFixture(t, newDB(t, inFlight))
	a := newApp(t, f, f.s, idem.WithLease(900*time.Millisecond))
	replies := make([]reply, inFlight)
	var wg sync.WaitGroup
	for i := range inFlight {
		wg.Go(func() { replies[i] = a.post("sat-"+strconv.Itoa(i), 64, 1500*time.Millisecond) })
	}
	wg.Wait()
	for i, r := range replies {
		key := "sat-" + strconv.Itoa(i)
		if r.err != nil || r.code != http.StatusCreated || !bytes.Equal(r.body, bodyFor(key, 64)) {
			t.Errorf("request %s: %v, want 201 with its body", key, r)
			continue
		}
		if again := a.post(key, 64, 0); again.code != http.StatusCreated || !again.replayed() || !bytes.Equal(again.body, r.body) {
			t.Errorf("retry of %s: %v, want the replay", key, again)
		}
		a.ranOnce(t, key, true)
	}
	if n := a.commitErrs.Load(); n != 0 {
		t.Errorf("%d commits failed (last: %v)", n, a.lastErr.Load())
	}
}

// TestHeldClaimNeverWaits: while a transaction holds its claim, past its
// lease end and past the time a sweeper may remove an abandoned claim, a
// duplicate's Claim answers the in-progress record at once, the watch
// poller does not report the key free, DeleteExpired leaves it, and none
// of them waits for the transaction's lock. The transaction then commits.
func TestHeldClaimNeverWaits(t *testing.T) {
	s := newStore(t, newDB(t, 8), WithSweepInterval(0)).ExactlyOnce()
	c := claimAt("held", "fp", "tok", t0, time.Minute)
	if res, err := s.Claim(t.Context(), c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	tx, err := s.BeginTx(t.Context(), c.Hold())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(t.Context())
	if h, ok := tx.(store.ClaimHolder); !ok || !h.HoldsClaim() {
		t.Error("the transaction does not report that it holds its claim (store.ClaimHolder)")
	}
	later := t0.Add(time.Hour) // the lease ended at t0+1m; a sweeper may drop an abandoned claim from t0+2m
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()

	res, err := s.Claim(ctx, claimAt("held", "fp", "other", later, time.Minute))
	switch {
	case err != nil:
		t.Errorf("a duplicate's Claim while the transaction holds the key: %v", err)
	case res.Acquired:
		t.Error("a duplicate's Claim took over a key that a live transaction holds")
	case res.Existing.State != store.InProgress:
		t.Errorf("a duplicate's Claim returned %+v, want the in-progress record", res.Existing)
	}

	ch, stop, err := s.Watch(ctx, c.Ref())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s.watch.PollOnce(s.base)
	s.watch.PollOnce(s.base)
	select {
	case <-ch:
		t.Error("the watch poller reported the held key free")
	default:
	}

	if n, err := s.DeleteExpired(ctx, later); err != nil || n != 0 {
		t.Errorf("DeleteExpired while the transaction holds the key: %d, %v; want 0 rows removed", n, err)
	}

	resp := result("\x01held", "held")
	if err := tx.Commit(ctx, completeAt(resp, later.Add(time.Second), later.Add(time.Hour))); err != nil {
		t.Fatalf("Commit of the held claim: %v", err)
	}
	rec, ok, err := s.Get(ctx, c.Ref(), later.Add(2*time.Second))
	if err != nil || !ok || rec.State != store.Completed || string(rec.Result.Body) != "held" {
		t.Fatalf("record after Commit: %+v %v %v", rec, ok, err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Error("the completion did not wake the watcher")
	}
}

// TestLargeResponse: a result whose body and head fit the server's
// max_allowed_packet is stored in full, up to the byte; a larger one is
// stored without its body, its head kept (as the engine stores a response
// over its cap), never refused, in both modes.
func TestLargeResponse(t *testing.T) {
	db := newDB(t, 2)
	packet := serverPacket(t, db)
	head := []byte("\x01\xc9\x01\x01\x02\x0cContent-Type\x01\x18application/octet-stream\x04Etag\x01\x04\"v1\"")
	s := newStore(t, db, WithSweepInterval(0))
	if got, want := s.MaxResponseSize(), packet-4096; got != want {
		t.Fatalf("MaxResponseSize() = %d, want max_allowed_packet (%d) - 4 KiB", got, packet)
	}
	limit := s.MaxResponseSize() - len(head)
	t.Logf("max_allowed_packet %d: bodies up to %d bytes are stored with this head", packet, limit)
	for _, mode := range []string{"plain", "exactly once"} {
		t.Run(mode, func(t *testing.T) {
			// The largest scope, key and token the table holds: the
			// reserve must cover them.
			scope := strings.Repeat("s", 600)
			token := strings.Repeat("t", maxToken)
			for _, tc := range []struct {
				name string
				size int
				full bool
			}{
				{"empty", 0, true},
				{"just under", limit - 1, true},
				{"at the limit", limit, true},
				{"just over", limit + 1, false},
				{"over the packet", packet + 1, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					key := mode + "/" + tc.name
					key += strings.Repeat("k", maxKey-len(key))
					c := store.Claim{Scope: scope, Key: key, Fingerprint: "fp", Token: token, Now: t0, LeaseEnd: t0.Add(time.Minute)}
					if res, err := s.Claim(t.Context(), c); err != nil || !res.Acquired {
						t.Fatal(res, err)
					}
					resp := store.Result{Head: head, Body: bodyFor(c.Key, tc.size)}
					var err error
					if mode == "plain" {
						err = s.Complete(t.Context(), c.Hold(), completeAt(resp, t0, t0.Add(time.Hour)))
					} else {
						var tx store.Tx
						if tx, err = s.ExactlyOnce().BeginTx(t.Context(), c.Hold()); err == nil {
							err = tx.Commit(t.Context(), completeAt(resp, t0, t0.Add(time.Hour)))
						}
					}
					if err != nil {
						t.Fatalf("storing a %d-byte body (limit %d, packet %d): %v", tc.size, limit, packet, err)
					}
					res, err := s.Claim(t.Context(), store.Claim{Scope: scope, Key: key, Fingerprint: "fp", Token: "retry", Now: t0.Add(time.Second), LeaseEnd: t0.Add(time.Minute)})
					if err != nil || res.Acquired || res.Existing.State != store.Completed {
						t.Fatalf("retry: %+v %v, want the completed record", res, err)
					}
					got := res.Existing.Result
					want := resp
					if !tc.full {
						want = store.Result{Head: head, BodyOmitted: true}
					}
					if !bytes.Equal(got.Head, want.Head) || got.BodyOmitted != want.BodyOmitted || !bytes.Equal(got.Body, want.Body) {
						t.Fatalf("stored a head of %d bytes, %d body bytes, omitted %v; want %d, %d bytes, omitted %v",
							len(got.Head), len(got.Body), got.BodyOmitted, len(want.Head), len(want.Body), want.BodyOmitted)
					}
				})
			}
		})
	}
}

// TestLargeResponseThroughEngine: with an engine cap above the server's
// packet limit, a body that fits is replayed in full and one that does
// not is replayed without its body; either way the retry does not run
// the handler again, in both modes.
func TestLargeResponseThroughEngine(t *testing.T) {
	db := newDB(t, 4)
	packet := serverPacket(t, db)
	limit := packet - 4096 - 1024 // MaxResponseSize, less room for any headers the engine stores
	for _, mode := range []string{"plain", "exactly once"} {
		t.Run(mode, func(t *testing.T) {
			f := newTxFixture(t, db)
			var st store.Store = f.s.Store
			if mode == "exactly once" {
				st = f.s
			}
			// Writing 16 MiB takes this server seconds: the store timeout
			// must cover the largest response.
			a := newAppHTTP(t, f, st, []idem.HTTPOption{idem.WithMaxResponseBody(packet + 1<<20)}, idem.WithStoreTimeout(time.Minute))
			for _, tc := range []struct {
				name string
				size int
				full bool
			}{
				{"fits", limit, true},
				{"over the packet", packet + 1, false},
			} {
				t.Run(tc.name, func(t *testing.T) {
					key := strings.ReplaceAll(tc.name, " ", "-")
					first := a.post(key, tc.size, 0)
					if first.code != http.StatusCreated || !bytes.Equal(first.body, bodyFor(key, tc.size)) {
						t.Fatalf("first request: %v, want 201 with all %d bytes", first, tc.size)
					}
					retry := a.post(key, tc.size, 0)
					switch {
					case retry.code != http.StatusCreated || !retry.replayed():
						t.Fatalf("retry: %v, want the replay", retry)
					case tc.full && (retry.omitted() || !bytes.Equal(retry.body, first.body)):
						t.Fatalf("retry: %v, want the whole body replayed", retry)
					case !tc.full && (!retry.omitted() || len(retry.body) != 0):
						t.Fatalf("retry: %v, want the replay without its body", retry)
					}
					a.ranOnce(t, key, mode == "exactly once")
				})
			}
			if n := a.commitErrs.Load(); n != 0 {
				t.Errorf("%d commits failed (last: %v)", n, a.lastErr.Load())
			}
		})
	}
}

// deadlockApp is an exactly-once engine in front of a handler that adds
// one to account X-First, waits until every handler of the round has done
// so, then adds one to account X-Second. Two requests with crossed
// accounts deadlock, and InnoDB rolls one transaction back. The handler
// ignores the error, as a careless one would, optionally writes a log row
// after it, and answers 201.
type deadlockApp struct {
	f        txFixture
	accounts string
	logs     string
	srv      *httptest.Server
	barrier  sync.WaitGroup
	mu       sync.Mutex
	victims  []string
	runs     map[string]int
	commits  []error // the errors of failed commits
}

func newDeadlockApp(t *testing.T, carryOn bool) *deadlockApp {
	t.Helper()
	f := newTxFixture(t, newDB(t, 8))
	d := &deadlockApp{f: f, accounts: randomTable(), logs: randomTable(), runs: map[string]int{}}
	t.Cleanup(func() { dropTable(t, d.accounts); dropTable(t, d.logs) })
	for _, q := range []string{
		"CREATE TABLE " + quoteIdent(d.accounts) + " (id INT PRIMARY KEY, n INT NOT NULL) ENGINE = InnoDB",
		"INSERT INTO " + quoteIdent(d.accounts) + " VALUES (1, 0), (2, 0)",
		"CREATE TABLE " + quoteIdent(d.logs) + " (ref VARCHAR(64) NOT NULL) ENGINE = InnoDB",
	} {
		if _, err := f.s.db.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	e, err := idem.New(f.s, idem.WithLogger(quietLog), idem.WithStoreObserver(func(_ context.Context, op idem.StoreOp, _ time.Duration, err error) {
		if op == idem.StoreCommit && err != nil {
			d.mu.Lock()
			d.commits = append(d.commits, err)
			d.mu.Unlock()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	d.srv = httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		d.mu.Lock()
		d.runs[key]++
		d.mu.Unlock()
		tx := Tx(r.Context())
		add := "UPDATE " + quoteIdent(d.accounts) + " SET n = n + 1 WHERE id = ?"
		if _, err := tx.ExecContext(r.Context(), add, r.Header.Get("X-First")); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if r.Header.Get("X-Barrier") != "" {
			d.barrier.Done()
			d.barrier.Wait()
		}
		if _, err := tx.ExecContext(r.Context(), add, r.Header.Get("X-Second")); err != nil {
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 1213 {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			d.mu.Lock()
			d.victims = append(d.victims, key)
			d.mu.Unlock()
			if carryOn {
				// After the rollback this statement runs outside any
				// transaction unless the store prevents it.
				tx.ExecContext(r.Context(), "INSERT INTO "+quoteIdent(d.logs)+" VALUES (?)", key)
			}
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "done "+key)
	})))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *deadlockApp) post(key, first, second string, barrier bool) reply {
	req, _ := http.NewRequest("POST", d.srv.URL+"/transfer", nil)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-First", first)
	req.Header.Set("X-Second", second)
	if barrier {
		req.Header.Set("X-Barrier", "1")
	}
	resp, err := d.srv.Client().Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, body: b, header: resp.Header, err: err}
}

func (d *deadlockApp) balance(t *testing.T, id int) int {
	t.Helper()
	var n int
	if err := d.f.s.db.QueryRowContext(t.Context(), "SELECT n FROM "+quoteIdent(d.accounts)+" WHERE id = ?", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeadlockVictim: two requests' transactions deadlock and InnoDB rolls
// one back entirely. That request's handler carries on and answers 201;
// its record must not say 201 while its writes are gone. It gets a 5xx
// and its key is released, so the retry runs it again, and in the end
// every transfer happened exactly once. With carryOn, a statement the
// handler runs after the rollback must not commit either.
func TestDeadlockVictim(t *testing.T) {
	for _, carryOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("carry on %v", carryOn), func(t *testing.T) {
			d := newDeadlockApp(t, carryOn)
			d.barrier.Add(2)
			replies := map[string]reply{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for key, acc := range map[string][2]string{"a": {"1", "2"}, "b": {"2", "1"}} {
				wg.Go(func() {
					r := d.post(key, acc[0], acc[1], true)
					mu.Lock()
					replies[key] = r
					mu.Unlock()
				})
			}
			wg.Wait()
			if len(d.victims) != 1 {
				t.Fatalf("%d deadlock victims (%v), want one; replies %v", len(d.victims), d.victims, replies)
			}
			victim := d.victims[0]
			survivor := map[string]string{"a": "b", "b": "a"}[victim]
			t.Logf("victim %s: %v; survivor %s: %v", victim, replies[victim], survivor, replies[survivor])
			if r := replies[survivor]; r.code != http.StatusCreated {
				t.Errorf("the survivor %s answered %v, want 201", survivor, r)
			}
			if r := replies[victim]; r.code < 500 {
				t.Errorf("the deadlock victim %s answered %v, but InnoDB rolled its writes back: want a 5xx", victim, r)
			}
			if len(d.commits) != 1 || !errors.Is(d.commits[0], ErrRolledBack) || errors.Is(d.commits[0], store.ErrLeaseLost) {
				t.Errorf("failed commits %v, want one, the victim's, saying the server rolled it back (ErrRolledBack), not a lost claim", d.commits)
			}
			rec, ok, err := d.f.s.Get(t.Context(), ref(idem.Scope("", "POST", ""), victim), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				t.Errorf("the victim's record is %v with head %q, want its key released", rec.State, rec.Result.Head)
			}
			var logged int
			if err := d.f.s.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+quoteIdent(d.logs)).Scan(&logged); err != nil {
				t.Fatal(err)
			}
			if logged != 0 {
				t.Errorf("%d log rows written after the rollback committed on their own", logged)
			}
			// The retry runs the victim again, alone, and replays after.
			acc := map[string][2]string{"a": {"1", "2"}, "b": {"2", "1"}}[victim]
			if r := d.post(victim, acc[0], acc[1], false); r.code != http.StatusCreated || r.replayed() {
				t.Errorf("the victim's retry: %v, want a fresh 201", r)
			}
			if r := d.post(victim, acc[0], acc[1], false); r.code != http.StatusCreated || !r.replayed() {
				t.Errorf("the victim's second retry: %v, want the replay", r)
			}
			if b1, b2 := d.balance(t, 1), d.balance(t, 2); b1 != 2 || b2 != 2 {
				t.Errorf("balances %d and %d, want 2 and 2: each transfer exactly once", b1, b2)
			}
		})
	}
}

// TestLockWaitTimeout: a handler's statement waits for a lock longer than
// innodb_lock_wait_timeout. With innodb_rollback_on_timeout OFF (the
// default) InnoDB rolls back that statement only: the transaction lives,
// and the handler's answer commits with the writes it did make. With it
// ON InnoDB rolls the whole transaction back, as for a deadlock: the
// request gets a 5xx and its key is released. The variable is global and
// read-only while the server runs, so the test checks whichever the
// server has.
func TestLockWaitTimeout(t *testing.T) {
	db := newDB(t, 4, func(c *mysql.Config) { c.Params = map[string]string{"innodb_lock_wait_timeout": "1"} })
	var rollbackOnTimeout bool
	if err := db.QueryRowContext(t.Context(), "SELECT @@innodb_rollback_on_timeout").Scan(&rollbackOnTimeout); err != nil {
		t.Fatal(err)
	}
	t.Logf("innodb_rollback_on_timeout = %v", rollbackOnTimeout)
	f := newTxFixture(t, db)
	accounts := randomTable()
	t.Cleanup(func() { dropTable(t, accounts) })
	for _, q := range []string{
		"CREATE TABLE " + quoteIdent(accounts) + " (id INT PRIMARY KEY, n INT NOT NULL) ENGINE = InnoDB",
		"INSERT INTO " + quoteIdent(accounts) + " VALUES (1, 0), (2, 0)",
	} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	holder := competitor(t, "UPDATE "+quoteIdent(accounts)+" SET n = n WHERE id = 2")
	defer holder.Rollback()
	stmtErr := make(chan error, 1)
	e, err := idem.New(f.s, idem.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := Tx(r.Context())
		if _, err := tx.ExecContext(r.Context(), "UPDATE "+quoteIdent(accounts)+" SET n = n + 1 WHERE id = 1"); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, err := tx.ExecContext(r.Context(), "UPDATE "+quoteIdent(accounts)+" SET n = n + 1 WHERE id = 2")
		stmtErr <- err
		w.WriteHeader(http.StatusCreated) // the handler ignores the timeout
	})))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/x", nil)
	req.Header.Set("Idempotency-Key", "timeout")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var me *mysql.MySQLError
	if err := <-stmtErr; !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("the second statement: %v, want a lock wait timeout (1205)", err)
	}
	var n1 int
	if err := db.QueryRowContext(t.Context(), "SELECT n FROM "+quoteIdent(accounts)+" WHERE id = 1").Scan(&n1); err != nil {
		t.Fatal(err)
	}
	_, stored, err := f.s.Get(t.Context(), ref(idem.Scope("", "POST", ""), "timeout"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if rollbackOnTimeout {
		if resp.StatusCode < 500 || stored || n1 != 0 {
			t.Errorf("rollback on timeout: answer %d, record stored %v, first write kept %v; want a 5xx, no record, no write", resp.StatusCode, stored, n1 != 0)
		}
		return
	}
	if resp.StatusCode != http.StatusCreated || !stored || n1 != 1 {
		t.Errorf("statement rollback: answer %d, record stored %v, first write kept %v; want 201 stored with the first write", resp.StatusCode, stored, n1 != 0)
	}
}

// claimed waits until the store holds a record of key (the apps' scope),
// so that a request sent next is a duplicate of one in flight, however
// loaded the machine.
func claimed(t *testing.T, s store.Getter, key string) {
	t.Helper()
	ref := store.Ref{Scope: idem.Scope("", http.MethodPost, ""), Key: key}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, ok, err := s.Get(t.Context(), ref, time.Now()); err == nil && ok {
			return
		}
	}
	t.Errorf("%s: no record 30 s after the first request was sent", key)
}

// TestExactlyOnceMatrix runs the engine in exactly-once mode through
// every isolation level, with and without heartbeat, on a pool exactly as
// large as the requests in flight, with a waiting duplicate of every
// request and responses of every size class: empty, at the engine's cap,
// over it, at the store's packet limit and over it (not with -short).
// Every request succeeds, each order commits once, the duplicates and
// later retries replay, and no commit fails.
func TestExactlyOnceMatrix(t *testing.T) {
	packet := serverPacket(t, newDB(t, 1))
	const engineCap = 1 << 20     // the engine's default
	limit := packet - 4096 - 1024 // MaxResponseSize, less room for the headers
	type request struct {
		key    string
		size   int
		big    bool // sent to the engine whose cap is above the packet limit
		stored bool // replayed with its body
	}
	requests := []request{
		{"empty", 0, false, true},
		{"at-cap", engineCap, false, true},
		{"over-cap", engineCap + 1, false, false},
		{"at-packet-limit", limit, true, true},
		{"over-packet", packet + 1, true, false},
	}
	if testing.Short() {
		// Writing 16 MiB takes seconds on a small server: -short keeps
		// the sizes up to the engine's cap.
		requests = requests[:3]
	}
	inFlight := 2 * len(requests) // each with a waiting duplicate
	for _, iso := range []struct {
		name    string
		opts    *sql.TxOptions
		session string
	}{
		{"read committed", &sql.TxOptions{Isolation: sql.LevelReadCommitted}, ""},
		{"repeatable read", &sql.TxOptions{Isolation: sql.LevelRepeatableRead}, ""},
		{"serializable", &sql.TxOptions{Isolation: sql.LevelSerializable}, ""},
		{"server default", &sql.TxOptions{}, ""},
		{"session serializable", &sql.TxOptions{}, "'SERIALIZABLE'"},
	} {
		for _, beat := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/heartbeat %v", iso.name, beat), func(t *testing.T) {
				db := newDB(t, inFlight, func(c *mysql.Config) {
					if iso.session != "" {
						c.Params = map[string]string{"tx_isolation": iso.session}
					}
				})
				f := newTxFixture(t, db)
				st := f.s.WithTxOptions(*iso.opts)
				// Writing 16 MiB takes this server seconds, and commits of
				// smaller responses queue behind it for the redo log: the
				// store timeout covers that.
				opts := []idem.Option{idem.WithLease(900 * time.Millisecond), idem.WithWait(30 * time.Second), idem.WithStoreTimeout(time.Minute)}
				if !beat {
					opts = append(opts, idem.WithHeartbeat(0))
				}
				small := newApp(t, f, st, opts...)
				big := newAppHTTP(t, f, st, []idem.HTTPOption{idem.WithMaxResponseBody(packet + 1<<20)}, opts...)
				appFor := func(r request) *app {
					if r.big {
						return big
					}
					return small
				}
				type result struct{ first, dup reply }
				results := make([]result, len(requests))
				var wg sync.WaitGroup
				for i, r := range requests {
					wg.Go(func() { results[i].first = appFor(r).post(r.key, r.size, time.Second) })
					wg.Go(func() {
						claimed(t, f.s, r.key) // a duplicate of a running request
						results[i].dup = appFor(r).post(r.key, r.size, time.Second)
					})
				}
				wg.Wait()
				for i, r := range requests {
					want := bodyFor(r.key, r.size)
					res := results[i]
					if res.first.code != http.StatusCreated || res.first.replayed() || !bytes.Equal(res.first.body, want) {
						t.Errorf("%s: first request %v, want a fresh 201 with all %d bytes", r.key, res.first, r.size)
					}
					if !replays(res.dup, want, r.stored) {
						t.Errorf("%s: waiting duplicate %v, want the replay (with its body: %v)", r.key, res.dup, r.stored)
					}
					if again := appFor(r).post(r.key, r.size, 0); !replays(again, want, r.stored) {
						t.Errorf("%s: later retry %v, want the replay (with its body: %v)", r.key, again, r.stored)
					}
					small.mu.Lock()
					big.mu.Lock()
					runs := small.runs[r.key] + big.runs[r.key]
					big.mu.Unlock()
					small.mu.Unlock()
					if runs != 1 {
						t.Errorf("%s: the handler ran %d times, want once", r.key, runs)
					}
					if n := f.ordersFor(t, r.key); n != 1 {
						t.Errorf("%s: %d orders committed, want one", r.key, n)
					}
				}
				if n := small.commitErrs.Load() + big.commitErrs.Load(); n != 0 {
					t.Errorf("%d commits failed (last: %v %v)", n, small.lastErr.Load(), big.lastErr.Load())
				}
			})
		}
	}
}

// replays reports whether r is the replay of a 201 with body want, or of
// its status and headers only when the body was not stored.
func replays(r reply, want []byte, stored bool) bool {
	if r.err != nil || r.code != http.StatusCreated || !r.replayed() {
		return false
	}
	if stored {
		return !r.omitted() && bytes.Equal(r.body, want)
	}
	return r.omitted() && len(r.body) == 0
}
