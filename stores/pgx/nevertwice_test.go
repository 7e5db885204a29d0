package pgxstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// This file holds the tests of issue 16, "never twice, in every
// configuration", for PostgreSQL's exactly-once mode: every isolation
// level, set on the transaction or inherited from the server, a pool no
// larger than the requests in flight, with and without the heartbeat and
// a waiting duplicate.

// isolationLevels are the levels exactly-once mode serves, as
// default_transaction_isolation spells them, with pgx's name.
var isolationLevels = []struct {
	name  string
	level pgx.TxIsoLevel
}{
	{"read committed", pgx.ReadCommitted},
	{"repeatable read", pgx.RepeatableRead},
	{"serializable", pgx.Serializable},
}

// adminExec runs statements on a connection of its own to the test
// database as the test's user.
func adminExec(t testing.TB, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, s := range stmts {
		if _, err := c.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func randomName(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// isolationRole creates a login role whose sessions default to level
// (ALTER ROLE ... SET default_transaction_isolation), allowed to create
// tables in the public schema, and drops it, with whatever it still owns,
// at cleanup. It returns the pool option that connects as that role. The
// server's and the database's defaults are left alone.
func isolationRole(t *testing.T, level string) func(*pgxpool.Config) {
	t.Helper()
	requirePostgres(t)
	role := randomName("idem_iso_")
	q := pgx.Identifier{role}.Sanitize()
	adminExec(t,
		"CREATE ROLE "+q+" LOGIN",
		"GRANT USAGE, CREATE ON SCHEMA public TO "+q,
		"ALTER ROLE "+q+" SET default_transaction_isolation = '"+level+"'",
	)
	t.Cleanup(func() { adminExec(t, "DROP OWNED BY "+q, "DROP ROLE "+q) })
	return func(c *pgxpool.Config) { c.ConnConfig.User = role }
}

// isolationDatabase creates a database whose sessions default to level
// (ALTER DATABASE ... SET default_transaction_isolation) and drops it at
// cleanup. It returns the pool option that connects to it.
func isolationDatabase(t *testing.T, level string) func(*pgxpool.Config) {
	t.Helper()
	requirePostgres(t)
	db := randomName("idem_iso_")
	q := pgx.Identifier{db}.Sanitize()
	adminExec(t,
		"CREATE DATABASE "+q,
		"ALTER DATABASE "+q+" SET default_transaction_isolation = '"+level+"'",
	)
	t.Cleanup(func() { adminExec(t, "DROP DATABASE IF EXISTS "+q+" WITH (FORCE)") })
	return func(c *pgxpool.Config) { c.ConnConfig.Database = db }
}

// TestConformanceIsolation runs the store suite in exactly-once mode with
// each strict isolation level, set with WithTxOptions and inherited from a
// role's default (where the store's own statements run at that level too),
// and in plain mode under those defaults.
func TestConformanceIsolation(t *testing.T) {
	for _, iso := range isolationLevels[1:] {
		t.Run(iso.name, func(t *testing.T) {
			t.Run("WithTxOptions", func(t *testing.T) {
				p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
				conformance.RunStore(t, func(t *testing.T) store.Store {
					return newStore(t, p).ExactlyOnce().WithTxOptions(pgx.TxOptions{IsoLevel: iso.level})
				})
			})
			p := newPool(t, isolationRole(t, iso.name), func(c *pgxpool.Config) { c.MaxConns = 16 })
			t.Run("role default", func(t *testing.T) {
				conformance.RunStore(t, func(t *testing.T) store.Store { return newStore(t, p).ExactlyOnce() })
			})
			t.Run("role default, plain", func(t *testing.T) {
				conformance.RunStore(t, func(t *testing.T) store.Store { return newStore(t, p) })
			})
		})
	}
}

// matrixCase is one configuration of TestNeverTwiceMatrix.
type matrixCase struct {
	iso    string         // the isolation level the handler's transaction must run at
	level  pgx.TxIsoLevel // set with WithTxOptions; "" to inherit it
	server func(t *testing.T, level string) func(*pgxpool.Config)
	beat   bool // the engine's heartbeat is on
	waiter bool // a duplicate of each request waits for it (idem.WithWait)
	roomy  bool // the pool has room to spare; otherwise exactly the requests in flight

	viaDatabase bool // server is the database's default, not a role's
}

func (c matrixCase) name() string {
	how := "WithTxOptions"
	if c.level == "" {
		how = "role default"
		if c.viaDatabase {
			how = "database default"
		}
	}
	pool := "pool=in flight"
	if c.roomy {
		pool = "pool=roomy"
	}
	return fmt.Sprintf("%s/%s/heartbeat=%v/waiter=%v/%s", c.iso, how, c.beat, c.waiter, pool)
}

// matrixKeys is how many first requests each case sends at once.
const matrixKeys = 3

// matrixLease is the engine's lease in the matrix, and matrixWork how
// long each handler runs: four beats of a third of the lease, and past the
// lease end, so that only a claim that holds its key while the handler
// runs keeps a waiting duplicate from taking it over.
const (
	matrixLease = 900 * time.Millisecond
	matrixWork  = 1200 * time.Millisecond
)

// TestNeverTwiceMatrix sends requests through the engine's HTTP
// middleware in exactly-once mode, in every configuration: isolation READ
// COMMITTED, REPEATABLE READ or SERIALIZABLE, set with WithTxOptions or
// inherited from a role's default_transaction_isolation; a pool exactly as
// large as the requests in flight; the heartbeat on (a short lease the
// handler outlasts) or off; with or without a duplicate that waits for
// each request. Every request must succeed: each handler's INSERT commits
// once per key, the duplicates and the retries replay, and no commit
// fails.
func TestNeverTwiceMatrix(t *testing.T) {
	requirePostgres(t)
	var cases []matrixCase
	for _, iso := range isolationLevels {
		for _, server := range []bool{false, true} {
			for _, beat := range []bool{true, false} {
				for _, waiter := range []bool{false, true} {
					c := matrixCase{iso: iso.name, level: iso.level, beat: beat, waiter: waiter}
					if server {
						c.level, c.server = "", isolationRole
					}
					cases = append(cases, c)
				}
			}
		}
		// A pool with room to spare: the heartbeat (when the engine
		// beats) always gets a connection.
		cases = append(cases, matrixCase{iso: iso.name, level: iso.level, beat: true, waiter: true, roomy: true})
	}
	// And one inherited from the database's default.
	cases = append(cases, matrixCase{iso: "serializable", server: isolationDatabase, beat: true, waiter: true, viaDatabase: true})
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) { runMatrixCase(t, c) })
	}
}

func runMatrixCase(t *testing.T, c matrixCase) {
	inFlight := matrixKeys
	if c.waiter {
		inFlight *= 2
	}
	conns := int32(inFlight)
	if c.roomy {
		conns = int32(2*inFlight + 2)
	}
	opts := []func(*pgxpool.Config){func(cfg *pgxpool.Config) { cfg.MaxConns = conns }}
	if c.server != nil {
		opts = append([]func(*pgxpool.Config){c.server(t, c.iso)}, opts...)
	}
	p := newPool(t, opts...)
	store := newStore(t, p).ExactlyOnce()
	if c.level != "" {
		store = store.WithTxOptions(pgx.TxOptions{IsoLevel: c.level})
	}
	orders := randomTable()
	if _, err := p.Exec(t.Context(), `CREATE TABLE `+quoted(orders)+` (key text PRIMARY KEY, isolation text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropTable(t, orders) })

	var (
		evMu   sync.Mutex
		events []idem.Event
	)
	eopts := []idem.Option{
		idem.WithLogger(quietLog),
		idem.WithLease(matrixLease),
		idem.WithObserver(func(_ context.Context, ev idem.Event) {
			evMu.Lock()
			events = append(events, ev)
			evMu.Unlock()
		}),
	}
	if !c.beat {
		eopts = append(eopts, idem.WithHeartbeat(0))
	}
	if c.waiter {
		eopts = append(eopts, idem.WithWait(20*time.Second))
	}
	e, err := idem.New(store, eopts...)
	if err != nil {
		t.Fatal(err)
	}

	var runs atomic.Int32
	started := make(map[string]chan struct{})
	for i := range matrixKeys {
		started[fmt.Sprint("k", i)] = make(chan struct{})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		ctx := r.Context()
		tx, ok := Tx(ctx)
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if _, err := tx.Exec(ctx, `INSERT INTO `+quoted(orders)+` (key, isolation) VALUES ($1, current_setting('transaction_isolation'))`, key); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if ch := started[key]; ch != nil {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
		select {
		case <-time.After(matrixWork):
		case <-ctx.Done():
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "created "+key)
	})
	srv := httptest.NewServer(e.Middleware()(mux))
	t.Cleanup(srv.Close)

	type answer struct {
		key, role string
		status    int
		replayed  bool
		body      string
	}
	post := func(key, role string) answer {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader("order "+key))
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Error(err)
			return answer{key: key, role: role}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{key, role, resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(b)}
	}
	answers := make(chan answer, 2*matrixKeys)
	var wg sync.WaitGroup
	for i := range matrixKeys {
		key := fmt.Sprint("k", i)
		wg.Go(func() { answers <- post(key, "first") })
		if c.waiter {
			wg.Go(func() {
				select {
				case <-started[key]:
				case <-time.After(20 * time.Second):
				}
				answers <- post(key, "duplicate")
			})
		}
	}
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.status != http.StatusCreated || a.body != "created "+a.key || a.replayed != (a.role == "duplicate") {
			t.Errorf("%s request for %s: %d %q (replayed %v); want 201 %q, replayed only for the duplicate",
				a.role, a.key, a.status, a.body, a.replayed, "created "+a.key)
		}
	}
	runsBefore := runs.Load()
	for i := range matrixKeys {
		key := fmt.Sprint("k", i)
		if a := post(key, "retry"); a.status != http.StatusCreated || !a.replayed || a.body != "created "+key {
			t.Errorf("retry of %s: %d %q (replayed %v); want the replay", key, a.status, a.body, a.replayed)
		}
	}
	if n := runs.Load(); n != runsBefore || n != matrixKeys {
		t.Errorf("handlers ran %d times (%d before the retries), want %d: once per key", n, runsBefore, matrixKeys)
	}
	rows, err := p.Query(t.Context(), `SELECT key, isolation FROM `+quoted(orders)+` ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Key, Isolation string }])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != matrixKeys {
		t.Errorf("orders %v, want one per key", got)
	}
	for _, o := range got {
		if o.Isolation != c.iso {
			t.Errorf("order %s ran at %s, want %s", o.Key, o.Isolation, c.iso)
		}
	}
	evMu.Lock()
	defer evMu.Unlock()
	for _, ev := range events {
		switch ev.Outcome {
		case idem.OutcomeExecuted, idem.OutcomeReplayed, idem.OutcomeReplayedAfterWait:
		default:
			t.Errorf("event %s (status %d): %v", ev.Outcome, ev.Status, ev.Err)
			continue
		}
		if ev.Err != nil {
			t.Errorf("event %s (status %d) with error: %v", ev.Outcome, ev.Status, ev.Err)
		}
	}
}

// TestSerializationFailureReleases: two requests whose handlers make a
// write skew at SERIALIZABLE (each counts the orders, then adds one, as if
// it were alone) cannot both commit. The one PostgreSQL refuses (at the
// handler's INSERT or at COMMIT, 40001) is answered 5xx and its key is
// released, so its retry runs again and commits; the other's key replays.
// The level is set with WithTxOptions and inherited from a role's default.
func TestSerializationFailureReleases(t *testing.T) {
	for _, how := range []string{"WithTxOptions", "role default"} {
		t.Run(how, func(t *testing.T) {
			opts := []func(*pgxpool.Config){func(c *pgxpool.Config) { c.MaxConns = 4 }}
			if how == "role default" {
				opts = append([]func(*pgxpool.Config){isolationRole(t, "serializable")}, opts...)
			}
			p := newPool(t, opts...)
			store := newStore(t, p).ExactlyOnce()
			if how == "WithTxOptions" {
				store = store.WithTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable})
			}
			orders := randomTable()
			if _, err := p.Exec(t.Context(), `CREATE TABLE `+quoted(orders)+` (key text PRIMARY KEY, seen integer NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dropTable(t, orders) })
			var (
				evMu   sync.Mutex
				events []idem.Event
			)
			e, err := idem.New(store, idem.WithLogger(quietLog), idem.WithObserver(func(_ context.Context, ev idem.Event) {
				evMu.Lock()
				events = append(events, ev)
				evMu.Unlock()
			}))
			if err != nil {
				t.Fatal(err)
			}
			var (
				runs    sync.Map // key -> *atomic.Int32
				counted sync.WaitGroup
				written sync.WaitGroup
				skewed  atomic.Int32
				stmtErr atomic.Int32
			)
			counted.Add(2)
			written.Add(2)
			mux := http.NewServeMux()
			mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
				ctx := r.Context()
				key := r.Header.Get("Idempotency-Key")
				n, _ := runs.LoadOrStore(key, new(atomic.Int32))
				n.(*atomic.Int32).Add(1)
				tx, _ := Tx(ctx)
				var seen int
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+quoted(orders)).Scan(&seen); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				// The first two runs both count before either writes, and
				// both write before either commits: PostgreSQL then refuses
				// the second COMMIT.
				first := skewed.Add(1) <= 2
				if first {
					counted.Done()
					counted.Wait()
				}
				// The handler answers 201 whatever its INSERT did: a
				// serialization failure there leaves the transaction
				// failed, and the engine's commit must refuse it.
				if _, err := tx.Exec(ctx, `INSERT INTO `+quoted(orders)+` (key, seen) VALUES ($1, $2)`, key, seen); err != nil {
					stmtErr.Add(1)
				}
				if first {
					written.Done()
					written.Wait()
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "%s saw %d", key, seen)
			})
			srv := httptest.NewServer(e.Middleware()(mux))
			t.Cleanup(srv.Close)
			post := func(key string) (int, string) {
				req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(key))
				req.Header.Set("Idempotency-Key", key)
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			codes := make(map[string]int)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, key := range []string{"a", "b"} {
				wg.Go(func() {
					code, _ := post(key)
					mu.Lock()
					codes[key] = code
					mu.Unlock()
				})
			}
			wg.Wait()
			var failed, ok string
			for key, code := range codes {
				switch {
				case code >= 500:
					failed = key
				case code == http.StatusCreated:
					ok = key
				}
			}
			if failed == "" || ok == "" {
				t.Fatalf("answers %v: want one 201 and one 5xx (the write skew's serialization failure)", codes)
			}
			t.Logf("answers %v; the refused write failed at the statement (not at COMMIT): %v", codes, stmtErr.Load() > 0)
			// Released: the retry runs again, sees the other's order, and commits.
			if code, body := post(failed); code != http.StatusCreated || body != failed+" saw 1" {
				t.Fatalf("retry of %s: %d %q, want 201 from a new run", failed, code, body)
			}
			for _, key := range []string{"a", "b"} {
				if code, _ := post(key); code != http.StatusCreated {
					t.Fatalf("replay of %s: %d", key, code)
				}
			}
			for key, want := range map[string]int32{failed: 2, ok: 1} {
				n, _ := runs.Load(key)
				if got := n.(*atomic.Int32).Load(); got != want {
					t.Errorf("%s ran %d times, want %d", key, got, want)
				}
			}
			var rows int
			if err := p.QueryRow(t.Context(), `SELECT count(*) FROM `+quoted(orders)).Scan(&rows); err != nil || rows != 2 {
				t.Fatalf("%d orders (%v), want 2", rows, err)
			}
			evMu.Lock()
			defer evMu.Unlock()
			var released int
			for _, ev := range events {
				if ev.Outcome == idem.OutcomeReleased {
					released++
					t.Logf("released: status %d, %v", ev.Status, ev.Err)
				}
			}
			if released != 1 {
				t.Errorf("%d requests released their key, want 1", released)
			}
		})
	}
}

// TestHeldClaim: while an exactly-once transaction holds its claim, past
// its lease end and past the time the sweeper would remove an abandoned
// claim, nothing waits for its lock or writes its row: a claim gets the
// in-progress record (a duplicate and a request with another body
// alike), a waiter's mark is skipped, DeleteExpired keeps the row. The
// commit then lands, and wakes this process's waiter of the key.
func TestHeldClaim(t *testing.T) {
	s := newStore(t, newPool(t, func(c *pgxpool.Config) { c.MaxConns = 4 })).ExactlyOnce()
	ctx := t.Context()
	listening(t, s.Store)
	c := claimAt("k", "fp", "tok", t0, time.Minute)
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	tx, err := s.BeginTx(ctx, c.Hold())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if h, ok := tx.(store.ClaimHolder); !ok || !h.HoldsClaim() {
		t.Fatal("the transaction does not hold its claim")
	}
	later := t0.Add(time.Hour) // past the lease end and a lease beyond
	// Each step runs under a guard: a statement that waits for the
	// transaction's lock would wait until it ends.
	guard := func(name string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s waited for the transaction's lock", name)
		}
	}
	for _, fp := range []string{"fp", "other"} {
		guard("Claim", func() {
			res, err := s.Claim(ctx, claimAt("k", fp, "tok-"+fp, later, time.Minute))
			if err != nil || res.Acquired || res.Existing.State != store.InProgress || res.Existing.Fingerprint != "fp" {
				t.Errorf("claim (fingerprint %s) = %+v, %v; want the held in-progress record", fp, res, err)
			}
		})
	}
	old := markTimeout
	markTimeout = time.Hour // a mark that waited for the lock would hang the guard
	defer func() { markTimeout = old }()
	var (
		wake <-chan struct{}
		stop func()
	)
	guard("Watch", func() {
		var err error
		if wake, stop, err = s.Watch(ctx, c.Ref()); err != nil {
			t.Error(err)
		}
	})
	if stop == nil {
		t.FailNow()
	}
	defer stop()
	guard("DeleteExpired", func() {
		if n, err := s.DeleteExpired(ctx, later); err != nil || n != 0 {
			t.Errorf("DeleteExpired = %d, %v; want the held row kept", n, err)
		}
	})
	var marked bool
	if err := s.db.QueryRow(ctx, `SELECT waiters FROM `+quoted(s.table)+` WHERE key = 'k'`).Scan(&marked); err != nil || marked {
		t.Fatalf("waiters = %v, %v; want the held row left unmarked", marked, err)
	}
	if closedNow(wake) {
		t.Fatal("the watch fired before the commit")
	}
	if err := tx.Commit(ctx, completion(store.Result{Head: result(201).Head, Body: []byte("held")}, later, later.Add(time.Hour))); err != nil {
		t.Fatalf("commit = %v", err)
	}
	if !closedNow(wake) {
		t.Error("the commit did not wake this process's waiter")
	}
	res, err := s.Claim(ctx, claimAt("k", "fp", "after", later, time.Minute))
	if err != nil || res.Acquired || res.Existing.State != store.Completed || string(res.Existing.Result.Body) != "held" {
		t.Fatalf("claim after the commit = %+v, %v; want the replay", res, err)
	}
}

// TestBeginTxRefusesReadOnly: a read-only transaction can neither lock the
// record nor complete it; BeginTx says so, with ErrBadOption for
// WithTxOptions, and explains default_transaction_read_only.
func TestBeginTxRefusesReadOnly(t *testing.T) {
	s := newStore(t, nil).ExactlyOnce()
	ctx := t.Context()
	c := claimAt("k", "fp", "tok", t0, time.Minute)
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	ro := s.WithTxOptions(pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if _, err := ro.BeginTx(ctx, c.Hold()); !errors.Is(err, ErrBadOption) {
		t.Fatalf("BeginTx with a read-only transaction = %v, want ErrBadOption", err)
	}
	p := newPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on" })
	s2, err := New(p, WithTable(s.Table()), WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	_, err = s2.ExactlyOnce().BeginTx(ctx, c.Hold())
	if err == nil || !strings.Contains(err.Error(), "default_transaction_read_only") {
		t.Fatalf("BeginTx in a read-only session = %v", err)
	}
	t.Log(err)
	// The claim is still held, and the pool is clean.
	if tx, err := s.BeginTx(ctx, c.Hold()); err != nil {
		t.Fatal(err)
	} else if err := tx.Commit(ctx, completion(result(200), t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
}

// TestStatementsAtReadCommitted: when the session's default isolation is
// stricter than READ COMMITTED, the first claim notices, and from then on
// each statement of the store runs in a READ COMMITTED transaction of its
// own, in one round trip; the exactly-once transaction keeps the default.
func TestStatementsAtReadCommitted(t *testing.T) {
	for _, level := range []string{"repeatable read", "serializable"} {
		t.Run(level, func(t *testing.T) {
			tr := &countingTracer{}
			var writes atomic.Int64
			p := newPool(t, func(c *pgxpool.Config) {
				c.MaxConns = 1
				c.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
				c.ConnConfig.Tracer = tr
				c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
					conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					return &writeCounter{Conn: conn, n: &writes}, err
				}
			})
			s := newStore(t, p).ExactlyOnce()
			ctx := t.Context()
			var got string
			if err := s.queryRow(ctx, "SELECT current_setting('transaction_isolation')", nil, &got); err != nil || got != level {
				t.Fatalf("before the first claim the store's statements run at %q (%v), want the default %q", got, err, level)
			}
			c := claimAt("k", "fp", "tok", t0, time.Minute)
			if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			if !s.strict.Load() {
				t.Fatal("the claim did not notice the stricter default")
			}
			if err := s.queryRow(ctx, "SELECT current_setting('transaction_isolation')", nil, &got); err != nil || got != "read committed" {
				t.Fatalf("the store's statements run at %q (%v), want read committed", got, err)
			}
			// One round trip a statement, once prepared.
			for _, key := range []string{"a", "b"} {
				c := claimAt(key, "fp", "tok", t0, time.Minute)
				w0 := writes.Load()
				if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
					t.Fatal(res, err)
				}
				if n := writes.Load() - w0; key == "b" && n != 1 {
					t.Errorf("a claim took %d round trips, want 1", n)
				}
				tx, err := s.BeginTx(ctx, c.Hold())
				if err != nil {
					t.Fatal(err)
				}
				htx, _ := Tx(tx.Context(ctx))
				if err := htx.QueryRow(ctx, "SELECT current_setting('transaction_isolation')").Scan(&got); err != nil || got != level {
					t.Fatalf("the handler's transaction runs at %q (%v), want the default %q", got, err, level)
				}
				if err := tx.Commit(ctx, completion(result(200), t0, t0.Add(time.Hour))); err != nil {
					t.Fatal(err)
				}
				w0 = writes.Load()
				if err := s.Release(ctx, c.Hold()); !errors.Is(err, store.ErrLeaseLost) {
					t.Fatalf("release of a completed record = %v", err)
				}
				if n := writes.Load() - w0; key == "b" && n != 1 {
					t.Errorf("a release took %d round trips, want 1", n)
				}
			}
			tr.take()
			// Every statement, and the connection is clean after a failed one.
			if _, err := s.exec(ctx, "SELECT 1/0"); err == nil {
				t.Fatal("division by zero succeeded")
			}
			if err := s.Extend(ctx, c.Hold(), t0, t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := s.Get(ctx, c.Ref(), t0); err != nil || !ok {
				t.Fatal(ok, err)
			}
			if err := s.Evict(ctx, c.Hold()); err != nil {
				t.Fatal(err)
			}
			if ok, err := s.Delete(ctx, ref(c.Scope, "a")); err != nil || !ok {
				t.Fatal(ok, err)
			}
			if n, err := s.DeleteExpired(ctx, t0.Add(time.Hour)); err != nil || n != 1 {
				t.Fatal(n, err)
			}
			if _, stop, err := s.Watch(ctx, ref(c.Scope, "b")); err != nil {
				t.Fatal(err)
			} else {
				stop()
			}
		})
	}
}

// TestPoolExhausted: with every pooled connection held by a running
// exactly-once request, a new request cannot claim: it answers 503 with
// Retry-After once the store timeout has passed, claims nothing and runs
// nothing, while the running request is unaffected and commits.
func TestPoolExhausted(t *testing.T) {
	p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	s := newStore(t, p).ExactlyOnce()
	e, err := idem.New(s, idem.WithLogger(quietLog), idem.WithStoreTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	running, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	srv := httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if r.Header.Get("Idempotency-Key") == "first" {
			close(running)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	})))
	t.Cleanup(srv.Close)
	post := func(key string) *http.Response {
		req, _ := http.NewRequest("POST", srv.URL, nil)
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	first := make(chan *http.Response, 1)
	go func() { first <- post("first") }()
	<-running
	resp := post("second")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a request with the pool exhausted: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	close(release)
	if resp := <-first; resp.StatusCode != http.StatusCreated {
		t.Fatalf("the running request: %d, want 201", resp.StatusCode)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handlers ran %d times, want 1", n)
	}
	var keys []string
	rows, _ := p.Query(t.Context(), `SELECT key FROM `+quoted(s.Table()))
	if keys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(keys) != 1 || keys[0] != "first" {
		t.Fatalf("records %q (%v), want only the first request's: the refused one claimed nothing", keys, err)
	}
	// Once the connection is back, the retry runs.
	if resp := post("second"); resp.StatusCode != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("retry: %d after %d runs", resp.StatusCode, runs.Load())
	}
}
