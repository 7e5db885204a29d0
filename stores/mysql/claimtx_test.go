package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
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

// claimTxApp is an exactly-once service whose handler inserts an order
// in the request's transaction, reports the transaction's connection id
// on started, and answers once proceed is closed.
type claimTxApp struct {
	f       txFixture
	srv     *httptest.Server
	other   *httptest.Server // a second instance: another engine on the same table
	runs    atomic.Int32
	started chan int64
	proceed chan struct{}
	once    sync.Once
}

func newClaimTxApp(t *testing.T, opts ...idem.Option) *claimTxApp {
	t.Helper()
	a := &claimTxApp{f: newTxFixture(t, newDB(t, 16)), started: make(chan int64, 4), proceed: make(chan struct{})}
	a.srv = a.instance(t, opts)
	a.other = a.instance(t, opts)
	t.Cleanup(a.release) // before the servers close, which waits for handlers
	return a
}

// release lets every handler answer.
func (a *claimTxApp) release() { a.once.Do(func() { close(a.proceed) }) }

func (a *claimTxApp) instance(t *testing.T, opts []idem.Option) *httptest.Server {
	e, err := idem.New(a.f.s, append([]idem.Option{idem.WithLogger(quietLog)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.runs.Add(1)
		var id int64
		if err := Tx(r.Context()).QueryRowContext(r.Context(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err := a.f.insert(r.Context(), int(orderIDs.Add(1)), r.Header.Get("Idempotency-Key")); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		a.started <- id
		<-a.proceed
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "order for "+r.Header.Get("Idempotency-Key"))
	})))
	t.Cleanup(srv.Close)
	return srv
}

func (a *claimTxApp) post(key, body string) reply { return postTo(a.srv, key, body) }

func postTo(srv *httptest.Server, key, body string) reply {
	req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reply{code: resp.StatusCode, body: b, header: resp.Header, err: err}
}

// TestClaimTxDuplicatesSeeTheUncommittedClaim: while the first request
// runs, its claim is not committed (it commits with the order), yet a
// duplicate learns of it at once: the same request gets 409, another
// payload 422, the admin view shows it in progress; after the commit
// the retry replays, and the order committed once.
func TestClaimTxDuplicatesSeeTheUncommittedClaim(t *testing.T) {
	a := newClaimTxApp(t)
	first := make(chan reply, 1)
	go func() { first <- a.post("k1", "pay 10") }()
	<-a.started
	var committed int
	if err := a.f.s.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+quoteIdent(a.f.s.table)).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	if committed != 0 {
		t.Errorf("%d records committed while the first request runs, want none (the claim commits with the order)", committed)
	}
	// The second instance has no flight of its own to answer from: it
	// asks the store.
	if r := postTo(a.other, "k1", "pay 10"); r.code != http.StatusConflict {
		t.Errorf("duplicate on another instance while the first runs: %v, want 409", r)
	}
	if r := postTo(a.other, "k1", "pay 99"); r.code != http.StatusUnprocessableEntity {
		t.Errorf("other payload on another instance while the first runs: %v, want 422", r)
	}
	if r := a.post("k1", "pay 99"); r.code != http.StatusUnprocessableEntity {
		t.Errorf("other payload on the same instance while the first runs: %v, want 422", r)
	}
	a.release()
	if r := <-first; r.code != http.StatusCreated || r.replayed() {
		t.Errorf("first request: %v, want a fresh 201", r)
	}
	if r := a.post("k1", "pay 10"); r.code != http.StatusCreated || !r.replayed() || string(r.body) != "order for k1" {
		t.Errorf("retry after the commit: %v, want the replay", r)
	}
	if n := a.runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
	if n := a.f.ordersFor(t, "k1"); n != 1 {
		t.Errorf("%d orders committed, want one", n)
	}
}

// TestClaimTxLostConnectionFreesTheKey: the server ends the first
// request's session while its handler runs (KILL, as for a lost
// connection). The claim goes with its transaction, and the order with
// it: a retry claims the key at once and commits the order; the first
// request's commit fails (5xx). One order commits, and the record is
// the retry's. The retry goes to another instance: this one would answer
// it from its own flight, which still runs.
func TestClaimTxLostConnectionFreesTheKey(t *testing.T) {
	a := newClaimTxApp(t, idem.WithLease(time.Hour))
	first := make(chan reply, 1)
	go func() { first <- a.post("k2", "pay 10") }()
	conn := <-a.started
	if _, err := a.f.s.db.ExecContext(t.Context(), "KILL ?", conn); err != nil {
		t.Fatal(err)
	}
	second := make(chan reply, 1)
	go func() { second <- postTo(a.other, "k2", "pay 10") }()
	select {
	case <-a.started:
	case r := <-second:
		t.Fatalf("retry on another instance after the first request's session ended: %v, want it to run (within the first claim's lease of an hour)", r)
	}
	a.release()
	if r := <-first; r.code < 500 {
		t.Errorf("first request, whose session was killed: %v, want 5xx (its order is gone)", r)
	}
	if r := <-second; r.code != http.StatusCreated || r.replayed() {
		t.Errorf("retry: %v, want a fresh 201", r)
	}
	if r := a.post("k2", "pay 10"); r.code != http.StatusCreated || !r.replayed() {
		t.Errorf("a later retry: %v, want the replay", r)
	}
	if n := a.f.ordersFor(t, "k2"); n != 1 {
		t.Errorf("%d orders committed, want one", n)
	}
}

// TestClaimTxLeavesSessionsClean: after claims of every kind (acquired,
// in progress, conflicting, rolled back), every pooled connection is
// back in autocommit, with no user-level lock held and its isolation
// level its own.
func TestClaimTxLeavesSessionsClean(t *testing.T) {
	db := newDB(t, 4)
	s := newStore(t, db).ExactlyOnce()
	ctx := t.Context()
	c := claimAt("k", "fp", "t1", t0, time.Minute)
	_, tx, err := s.ClaimTx(ctx, c)
	if err != nil || tx == nil {
		t.Fatal(tx, err)
	}
	for i := range 8 { // conflicts: each reads the claim with READ UNCOMMITTED
		if res, tx2, err := s.ClaimTx(ctx, claimAt("k", "other", "t2", t0.Add(time.Duration(i)*time.Second), time.Minute)); err != nil || res.Acquired || tx2 != nil {
			t.Fatal(res, err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	_, tx, err = s.ClaimTx(ctx, claimAt("k", "fp", "t3", t0.Add(time.Minute), time.Minute))
	if err != nil || tx == nil {
		t.Fatal(tx, err)
	}
	if err := tx.Commit(ctx, completeAt(result("\x01ok", "ok"), t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	// Every connection of the pool, held at once so each is seen.
	conns := make([]interface{ Close() error }, 0, 4)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 4 {
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		var auto int
		var held bool
		if err := conn.QueryRowContext(ctx, "SELECT @@autocommit").Scan(&auto); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRowContext(ctx, s.q.held.render(s.table, scopeKey(c.Scope), c.Key)).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if auto != 1 || held {
			t.Errorf("a pooled connection has autocommit %d, the record's lock held %v; want 1, none", auto, held)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	conns = conns[:0]
	// A READ UNCOMMITTED level left pending for a connection's next
	// transaction shows in no variable: it would let this read see
	// another session's uncommitted insert.
	other, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(ctx, "START TRANSACTION"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(ctx, "INSERT INTO "+quoteIdent(s.table)+" (scope, `key`, fingerprint, token, state, created_at, lease_end, expires_at) VALUES ('s', 'dirty', 'fp', 't', 1, 0, 1, 1)"); err != nil {
		t.Fatal(err)
	}
	defer other.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
	for range 3 {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+quoteIdent(s.table)+" WHERE `key` = 'dirty'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatal("a pooled connection read another session's uncommitted row: a READ UNCOMMITTED level was left pending on it")
		}
	}
}

// TestClaimTxCanceledLeavesNothing ends ClaimTx's context at every point
// of its statements: a ClaimTx that fails must leave no claim behind.
// database/sql rolls a transaction back on its own when its context ends;
// the store's own end of the session must not race that rollback with a
// statement that would commit it (SET autocommit = 1).
func TestClaimTxCanceledLeavesNothing(t *testing.T) {
	s := newStore(t, nil)
	eo := s.ExactlyOnce()
	now := time.Now().UTC()
	orphans, failed := 0, 0
	for i := range 1500 {
		key := "k" + strconv.Itoa(i)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%40)*50*time.Microsecond+300*time.Microsecond)
		res, tx, err := eo.ClaimTx(ctx, claimAt(key, "fp", "T", now, time.Minute))
		cancel()
		switch {
		case err == nil && res.Acquired:
			tx.Rollback(context.Background())
			continue
		case err == nil:
			t.Fatalf("ClaimTx of a fresh key: %+v", res)
		}
		failed++
		time.Sleep(2 * time.Millisecond) // database/sql's rollback, if it lost the race
		var n int
		if err := s.db.QueryRow("SELECT COUNT(*) FROM "+quoteIdent(s.table)+" WHERE `key` = ?", key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		orphans += n
	}
	t.Logf("%d of 1500 claims failed with their context", failed)
	if orphans > 0 {
		t.Errorf("%d claims committed although ClaimTx failed", orphans)
	}
}

// TestClaimTxFailedAfterRollbackDoesNotWait: the handler rolled its
// transaction back (the claim with it) and answers 4xx, which Commit
// stores on its own, claiming the key again; another request claims it
// in its transaction as soon as the first session lets go of the lock.
// Commit must not wait for that one's handler (a 4 s context here,
// against a 5 s handler; two such rounds are enough), nor leave a claim of its own behind once the
// other rolls back.
func TestClaimTxFailedAfterRollbackDoesNotWait(t *testing.T) {
	s := newStore(t, nil)
	eo := s.ExactlyOnce()
	ctx := t.Context()
	raced := 0
	for i := 0; i < 8 && raced < 2; i++ {
		key := "k" + strconv.Itoa(i)
		now := time.Now().UTC()
		res, txA, err := eo.ClaimTx(ctx, claimAt(key, "fp", "A", now, time.Minute))
		if err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		if err := Tx(txA.Context(ctx)).Rollback(); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		bClaimed := make(chan bool, 1)
		go func() { // B, claiming until it gets the key or sees A's record
			for {
				select {
				case <-stop:
					bClaimed <- false
					return
				default:
				}
				r, tx, err := eo.ClaimTx(ctx, claimAt(key, "fp", "B", now, time.Minute))
				if err == nil && r.Acquired {
					time.Sleep(5 * time.Second) // B's handler
					tx.Rollback(context.Background())
					bClaimed <- true
					return
				}
				if err == nil && r.Existing.State == store.Completed {
					bClaimed <- false
					return
				}
			}
		}()
		time.Sleep(5 * time.Millisecond)
		cctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		err = txA.Commit(cctx, failedAt(result("\x01bad", "bad"), now, now.Add(time.Hour)))
		cancel()
		close(stop)
		if !<-bClaimed {
			if err != nil {
				t.Errorf("%s: A's Commit of a failed outcome: %v, want it stored", key, err)
			}
			continue
		}
		raced++
		if !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("%s: A's Commit of a failed outcome, B holding the key: %v, want ErrLeaseLost at once", key, err)
		}
		var n int
		if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+quoteIdent(s.table)+" WHERE `key` = ?", key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s: a record left after B rolled back, want none", key)
		}
	}
	t.Logf("B claimed the key first in %d rounds", raced)
}

// TestClaimTxWaiterDoesNotSpin: a waiter on another instance, in wait
// mode, watches a key whose claim is not committed. The poller must see
// it in progress (the lock), not as gone: otherwise it wakes the waiter
// on every poll, and each wake is a claim. The count is compared with the
// same wait on claims made apart from the transaction (ClaimTx hidden).
func TestClaimTxWaiterDoesNotSpin(t *testing.T) {
	claims := map[string]int64{}
	for _, mode := range []string{"ClaimTx", "BeginTx"} {
		s1 := newStore(t, nil)
		s2, err := New(newDB(t, 8), WithTable(s1.Table()), WithSweepInterval(0), WithLogger(quietLog))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s2.Close() })
		release := make(chan struct{})
		var runs atomic.Int32
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			<-release
			io.WriteString(w, "done")
		})
		var n atomic.Int64
		var st1, st2 idem.Store = s1.ExactlyOnce(), &countingClaims{s2.ExactlyOnce(), &n}
		if mode == "BeginTx" {
			st1, st2 = beginTxOnly{s1.ExactlyOnce(), nil}, beginTxOnly{s2.ExactlyOnce(), &n}
		}
		var wg sync.WaitGroup
		var srvs []*httptest.Server
		for _, s := range []idem.Store{st1, st2} {
			e, err := idem.New(s, idem.WithWait(10*time.Second), idem.WithLogger(quietLog))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(e.Middleware()(handler))
			t.Cleanup(srv.Close)
			srvs = append(srvs, srv)
		}
		wg.Go(func() { postTo(srvs[0], "w", "") })
		for runs.Load() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		wg.Go(func() { postTo(srvs[1], "w", "") })
		time.Sleep(3 * time.Second)
		close(release)
		wg.Wait()
		if runs.Load() != 1 {
			t.Errorf("%s: the handler ran %d times, want once", mode, runs.Load())
		}
		claims[mode] = n.Load()
	}
	t.Logf("claims by the waiter through a 3 s handler: %d claiming in the transaction, %d apart from it", claims["ClaimTx"], claims["BeginTx"])
	if claims["ClaimTx"] > claims["BeginTx"]*3/2+3 {
		t.Errorf("the waiter claimed %d times, against %d when claims are committed apart: the poller wakes it for a claim not yet committed", claims["ClaimTx"], claims["BeginTx"])
	}
}

// countingClaims counts an exactly-once store's claims.
type countingClaims struct {
	*ExactlyOnceStore
	n *atomic.Int64
}

func (c *countingClaims) ClaimTx(ctx context.Context, cl store.Claim) (store.ClaimResult, store.Tx, error) {
	c.n.Add(1)
	return c.ExactlyOnceStore.ClaimTx(ctx, cl)
}

// beginTxOnly is an exactly-once store without ClaimTx: the engine claims
// and then begins, as before store.TxClaimer.
type beginTxOnly struct {
	*ExactlyOnceStore
	n *atomic.Int64
}

func (b beginTxOnly) Claim(ctx context.Context, c store.Claim) (store.ClaimResult, error) {
	if b.n != nil {
		b.n.Add(1)
	}
	return b.ExactlyOnceStore.Claim(ctx, c)
}

// ClaimTx hides the promoted method: beginTxOnly is no store.TxClaimer.
func (beginTxOnly) ClaimTx() {}

// failingLevel is a driver.Connector whose connections fail the READ
// UNCOMMITTED statement of a conflicting claim (dirtyLevelSQL) while fail
// is set: a server blip just after the claim learned the key is held.
type failingLevel struct {
	driver.Connector
	fail *atomic.Bool
}

func (c failingLevel) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &failingLevelConn{cn, c.fail}, nil
}

type failingLevelConn struct {
	driver.Conn
	fail *atomic.Bool
}

func (c *failingLevelConn) ExecContext(ctx context.Context, q string, a []driver.NamedValue) (driver.Result, error) {
	if q == dirtyLevelSQL && c.fail.Load() {
		return nil, errors.New("injected: connection reset")
	}
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, a)
}

func (c *failingLevelConn) QueryContext(ctx context.Context, q string, a []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, a)
}

func (c *failingLevelConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, o)
}

func (c *failingLevelConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (c *failingLevelConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *failingLevelConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

func (c *failingLevelConn) CheckNamedValue(v *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(v)
}

// TestClaimTxHeldKeyNeverFailsOpen: a duplicate on another instance
// learns that the key is held (its claim gets no lock), then the read of
// the holder's fingerprint fails. With WithFailOpen, an error there would
// run the handler unprotected beside the holder: the claim answers in
// progress instead.
func TestClaimTxHeldKeyNeverFailsOpen(t *testing.T) {
	requireMySQL(t)
	base, err := mysql.NewConnector(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	db := sql.OpenDB(failingLevel{base, &fail})
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	s := newStore(t, db).ExactlyOnce()
	var runs atomic.Int32
	started := make(chan struct{}, 2)
	proceed := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(proceed) }) }
	t.Cleanup(release)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		started <- struct{}{}
		<-proceed
		w.WriteHeader(http.StatusCreated)
	})
	var srvs [2]*httptest.Server
	for i := range srvs {
		e, err := idem.New(s, idem.WithLogger(quietLog), idem.WithFailOpen())
		if err != nil {
			t.Fatal(err)
		}
		srvs[i] = httptest.NewServer(e.Middleware()(h))
		t.Cleanup(srvs[i].Close)
	}
	first := make(chan reply, 1)
	go func() { first <- postTo(srvs[0], "k", "{}") }()
	<-started
	fail.Store(true)
	dup := make(chan reply, 1)
	go func() { dup <- postTo(srvs[1], "k", "{}") }()
	select {
	case <-started:
		t.Error("the handler ran beside the holder: the duplicate's claim failed, and failed open")
		release()
		<-dup
	case r := <-dup:
		if r.code != http.StatusConflict {
			t.Errorf("duplicate on another instance, its read of the holder failing: %v, want 409", r)
		}
	}
	fail.Store(false)
	release()
	if r := <-first; r.code != http.StatusCreated {
		t.Errorf("first request: %v", r)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
}

// TestClaimTxReleaseDuringTakeover: the handler committed its transaction
// early (the claim with it) and ran past its lease; another request then
// takes the record over in its transaction. The first request's release
// (its answer was a 5xx) must not wait for that one's handler, nor delete
// what it claimed.
func TestClaimTxReleaseDuringTakeover(t *testing.T) {
	s := newStore(t, nil).ExactlyOnce()
	ctx := t.Context()
	now := time.Now().UTC()
	// A's lease ended two seconds ago by the server's clock.
	a := claimAt("k", "fp", "tA", now.Add(-3*time.Second), time.Second)
	_, txA, err := s.ClaimTx(ctx, a)
	if err != nil || txA == nil {
		t.Fatal(err)
	}
	if err := Tx(txA.Context(ctx)).Commit(); err != nil { // the handler commits early
		t.Fatal(err)
	}
	if err := txA.Rollback(ctx); err != nil { // the engine, after a 5xx
		t.Fatal(err)
	}
	res, txB, err := s.ClaimTx(ctx, claimAt("k", "fp", "tB", now, time.Minute))
	if err != nil || txB == nil {
		t.Fatal("the takeover after A's lease:", res, err)
	}
	defer txB.Rollback(ctx)
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := s.Release(rctx, a.Hold()); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("A's release during B's takeover: %v, want ErrLeaseLost at once", err)
	}
	if err := txB.Commit(ctx, completeAt(result("\x01ok", "ok"), now, now.Add(time.Hour))); err != nil {
		t.Errorf("B's commit after A's release: %v", err)
	}
}

// TestClaimTxUncommittedCompletionIsInFlight: a session holds the
// record's lock and has written a completed record it has not committed.
// Another claim must not replay it (it may yet roll back): it answers in
// progress, with the holder's fingerprint, so that another payload gets
// 422; once it commits, the claim replays it.
func TestClaimTxUncommittedCompletionIsInFlight(t *testing.T) {
	db := newDB(t, 4)
	s := newStore(t, db).ExactlyOnce()
	ctx := t.Context()
	now := time.Now().UTC()
	c := claimAt("k", "fp-holder", "t1", now, time.Minute)
	_, tx, err := s.ClaimTx(ctx, c)
	if err != nil || tx == nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// The completion, written in the holder's transaction, not committed.
	if _, err := Tx(tx.Context(ctx)).ExecContext(ctx, "UPDATE "+quoteIdent(s.table)+" SET state = 2, headers = X'01', body = 'ok', lease_end = NULL, expires_at = ? WHERE `key` = 'k'", now.Add(time.Hour).UnixMicro()); err != nil {
		t.Fatal(err)
	}
	res, tx2, err := s.ClaimTx(ctx, claimAt("k", "fp-other", "t2", now.Add(time.Second), time.Minute))
	switch {
	case err != nil || tx2 != nil || res.Acquired:
		t.Fatalf("claim beside an uncommitted completion: %+v, %v", res, err)
	case res.Existing.State != store.InProgress || res.Existing.Fingerprint != "fp-holder":
		t.Errorf("claim beside an uncommitted completion answered %s %q, want in progress with the holder's fingerprint", res.Existing.State, res.Existing.Fingerprint)
	}
}

// lockAfter starts a session that waits (up to 10 s) for the record's
// user-level lock, as a duplicate's claim takes it right after the holder
// lets go, and holds it for hold: a claim that lost, for a few
// statements. It returns once the session is waiting; done reports when
// it let go.
func lockAfter(t *testing.T, s *Store, c store.Claim, hold time.Duration) (done <-chan struct{}) {
	t.Helper()
	ctx := context.Background()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q := compile("SELECT GET_LOCK("+holdName+", 10)", quoteIdent(s.table), "table", "scope", "key").render(s.table, scopeKey(c.Scope), c.Key)
	ch := make(chan struct{})
	waiting := make(chan struct{})
	go func() {
		defer close(ch)
		defer conn.Close()
		close(waiting)
		var got int
		if err := conn.QueryRowContext(ctx, q).Scan(&got); err != nil || got != 1 {
			t.Error("GET_LOCK:", got, err)
			return
		}
		time.Sleep(hold)
		conn.ExecContext(ctx, "DO RELEASE_ALL_LOCKS()") //nolint:errcheck // closing ends it anyway
	}()
	<-waiting
	time.Sleep(50 * time.Millisecond) // let GET_LOCK reach the server
	return ch
}

// TestClaimTxEarlyCommitEndsDespiteALosingClaim: the handler committed
// its transaction early (the claim with it), and the request ends, with
// a 5xx (release) or a 4xx (stored on its own). A duplicate's claim takes
// the record's lock as soon as the first session lets go, and holds it a
// moment before it finds the claim live and gives up. The lease has not
// ended, so nothing can take the record over: the release must delete
// the claim, and the 4xx must be stored, not both given up for lost.
func TestClaimTxEarlyCommitEndsDespiteALosingClaim(t *testing.T) {
	for _, failed := range []bool{false, true} {
		t.Run(fmt.Sprintf("4xx %v", failed), func(t *testing.T) {
			s := newStore(t, nil).ExactlyOnce()
			ctx := t.Context()
			now := time.Now().UTC()
			a := claimAt("k", "fp", "tA", now, time.Minute)
			_, txA, err := s.ClaimTx(ctx, a)
			if err != nil || txA == nil {
				t.Fatal(err)
			}
			if err := Tx(txA.Context(ctx)).Commit(); err != nil { // the handler commits early
				t.Fatal(err)
			}
			done := lockAfter(t, s.Store, a, 500*time.Millisecond)
			if failed {
				if err := txA.Commit(ctx, failedAt(result("\x01bad", "bad"), now, now.Add(time.Hour))); err != nil {
					t.Errorf("Commit of a 4xx after an early commit: %v, want it stored", err)
				}
			} else {
				if err := txA.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
				if err := s.Release(ctx, a.Hold()); err != nil {
					t.Errorf("Release after an early commit: %v, want the claim deleted", err)
				}
			}
			<-done
			rec, found, err := s.Get(ctx, a.Ref(), now)
			switch {
			case err != nil:
				t.Fatal(err)
			case failed && (!found || rec.State != store.Completed):
				t.Errorf("after the 4xx: found %v, %s; want the completed record", found, rec.State)
			case !failed && found:
				t.Errorf("after the release: %s record left, want none", rec.State)
			}
		})
	}
}
