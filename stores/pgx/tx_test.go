package pgxstore

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
	"github.com/jackc/pgx/v5"
)

// txFixture is an exactly-once store and a business table "orders" whose
// deferred unique constraint on ref lets a test make COMMIT itself fail.
type txFixture struct {
	s      *ExactlyOnceStore
	orders string
}

func newTxFixture(t *testing.T) txFixture {
	t.Helper()
	s := newStore(t, nil).ExactlyOnce()
	orders := randomTable()
	t.Cleanup(func() { dropTable(t, orders) })
	if _, err := s.db.Exec(t.Context(), `CREATE TABLE `+quoted(orders)+` (
		id  bigint PRIMARY KEY,
		ref text NOT NULL,
		UNIQUE (ref) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	return txFixture{s, orders}
}

func (f txFixture) orderExists(t *testing.T, id int) bool {
	t.Helper()
	var ok bool
	if err := f.s.db.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM `+quoted(f.orders)+` WHERE id = $1)`, id).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// begin claims key and starts its transaction, as the engine does.
func (f txFixture) begin(t *testing.T, key string) (store.Claim, context.Context, store.Tx) {
	t.Helper()
	c := claimAt(key, "fp", "tok-"+key, t0, time.Minute)
	if res, err := f.s.Claim(t.Context(), c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	tx, err := f.s.BeginTx(t.Context(), c.Hold())
	if err != nil {
		t.Fatal(err)
	}
	return c, tx.Context(t.Context()), tx
}

// handler inserts an order through the request's transaction.
func (f txFixture) handler(t *testing.T, ctx context.Context, id int, ref string) {
	t.Helper()
	tx, ok := Tx(ctx)
	if !ok {
		t.Fatal("no transaction in the request context")
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+quoted(f.orders)+` (id, ref) VALUES ($1, $2)`, id, ref); err != nil {
		t.Fatal(err)
	}
}

func TestExactlyOnceCommit(t *testing.T) {
	f := newTxFixture(t)
	c, ctx, tx := f.begin(t, "k")
	f.handler(t, ctx, 1, "a")
	// Before the commit, nothing is visible outside the transaction.
	if f.orderExists(t, 1) {
		t.Fatal("order visible before commit")
	}
	resp := store.Result{Head: result(201).Head, Body: []byte("created")}
	if err := tx.Commit(t.Context(), completion(resp, t0.Add(time.Second), t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatalf("rollback after commit: %v", err)
	}
	if !f.orderExists(t, 1) {
		t.Fatal("order missing after commit")
	}
	rec, ok, err := f.s.Get(t.Context(), c.Ref(), t0.Add(time.Second))
	if err != nil || !ok || rec.State != store.Completed || !reflect.DeepEqual(rec.Result, resp) {
		t.Fatalf("record = %+v %v %v", rec, ok, err)
	}
}

// A 5xx: the engine rolls back and releases; the key runs again.
func TestExactlyOnceRollback(t *testing.T) {
	f := newTxFixture(t)
	c, ctx, tx := f.begin(t, "k")
	f.handler(t, ctx, 1, "a")
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatalf("second rollback: %v", err)
	}
	if err := f.s.Release(t.Context(), c.Hold()); err != nil {
		t.Fatal(err)
	}
	if f.orderExists(t, 1) {
		t.Fatal("order survived rollback")
	}
	if res, err := f.s.Claim(t.Context(), claimAt("k", "fp", "again", t0, time.Minute)); err != nil || !res.Acquired {
		t.Fatalf("claim after release = %+v %v", res, err)
	}
}

// COMMIT itself fails (a deferred constraint is violated): Commit returns
// the error, and neither the order nor the completed record remains; the
// engine then releases the claim.
func TestExactlyOnceCommitFails(t *testing.T) {
	f := newTxFixture(t)
	if _, err := f.s.db.Exec(t.Context(), `INSERT INTO `+quoted(f.orders)+` (id, ref) VALUES (100, 'taken')`); err != nil {
		t.Fatal(err)
	}
	c, ctx, tx := f.begin(t, "k")
	f.handler(t, ctx, 1, "taken") // deferred: accepted until COMMIT
	err := tx.Commit(t.Context(), completion(result(201), t0.Add(time.Second), t0.Add(time.Hour)))
	if err == nil || errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("commit error = %v, want the constraint violation", err)
	}
	t.Logf("commit error: %v", err)
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatalf("rollback after failed commit: %v", err)
	}
	if f.orderExists(t, 1) {
		t.Fatal("order committed")
	}
	rec, ok, err := f.s.Get(t.Context(), c.Ref(), t0.Add(time.Second))
	if err != nil || !ok || rec.State != store.InProgress {
		t.Fatalf("record = %+v %v %v; want still in progress", rec, ok, err)
	}
	if err := f.s.Release(t.Context(), c.Hold()); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := f.s.Get(t.Context(), c.Ref(), t0.Add(time.Second)); ok {
		t.Fatal("record survived release")
	}
	// The pool's connection is clean again.
	if _, err := f.s.db.Exec(t.Context(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
}

// The transaction holds the claim: while it lives, a claim past the lease
// end gets the in-progress record and takes nothing over, and the commit
// lands however late. A claim taken over before BeginTx (the lease ran out
// between the claim and the transaction) fails BeginTx with ErrLeaseLost,
// so the handler never runs.
func TestExactlyOnceLeaseLost(t *testing.T) {
	f := newTxFixture(t)
	c, ctx, tx := f.begin(t, "k")
	defer tx.Rollback(context.Background())
	f.handler(t, ctx, 1, "a")
	later := t0.Add(2 * time.Minute)
	res, err := f.s.Claim(t.Context(), claimAt("k", "fp", "other", later, time.Minute))
	if err != nil || res.Acquired || res.Existing.State != store.InProgress {
		t.Fatalf("claim past the lease end of a held claim = %+v, %v; want the in-progress record", res, err)
	}
	if err := tx.Commit(t.Context(), completion(result(201), later, later.Add(time.Hour))); err != nil {
		t.Fatalf("commit after the lease end of a held claim = %v", err)
	}
	if !f.orderExists(t, 1) {
		t.Fatal("order missing")
	}
	if rec, ok, _ := f.s.Get(t.Context(), c.Ref(), later); !ok || rec.State != store.Completed {
		t.Fatalf("record = %+v", rec)
	}

	// Taken over before the transaction began.
	c2 := claimAt("k2", "fp", "tok-k2", t0, time.Minute)
	if res, err := f.s.Claim(t.Context(), c2); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if res, err := f.s.Claim(t.Context(), claimAt("k2", "fp", "taker", later, time.Minute)); err != nil || !res.Acquired {
		t.Fatalf("takeover = %+v %v", res, err)
	}
	if tx, err := f.s.BeginTx(t.Context(), c2.Hold()); !errors.Is(err, store.ErrLeaseLost) {
		if tx != nil {
			tx.Rollback(context.Background())
		}
		t.Fatalf("BeginTx after a takeover = %v, want ErrLeaseLost", err)
	}
	if err := f.s.Release(t.Context(), c2.Hold()); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release by the old owner = %v", err)
	}
	// The failed BeginTx left no connection in a transaction.
	p, _ := f.s.pool()
	for _, c := range p.AcquireAllIdle(t.Context()) {
		if st := c.Conn().PgConn().TxStatus(); st != 'I' {
			t.Errorf("pooled connection in transaction status %q", st)
		}
		c.Release()
	}
}

// The handler may not commit the transaction, may roll it back (the
// engine's commit then fails and the key is released), and may ignore it.
func TestExactlyOnceHandlerTx(t *testing.T) {
	f := newTxFixture(t)

	_, ctx, tx := f.begin(t, "commits")
	htx, _ := Tx(ctx)
	if err := htx.Commit(ctx); !errors.Is(err, ErrTxManaged) {
		t.Fatalf("handler commit = %v", err)
	}
	// Nested transactions (savepoints) work.
	sp, err := htx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Exec(ctx, `INSERT INTO `+quoted(f.orders)+` (id, ref) VALUES (7, 'sp')`); err != nil {
		t.Fatal(err)
	}
	if err := sp.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context(), completion(result(200), t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if !f.orderExists(t, 7) {
		t.Fatal("savepoint write lost")
	}

	_, ctx, tx = f.begin(t, "rolls-back")
	f.handler(t, ctx, 8, "rb")
	htx, _ = Tx(ctx)
	if err := htx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context(), completion(result(200), t0, t0.Add(time.Hour))); err == nil || errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("commit after the handler rolled back = %v", err)
	}
	if f.orderExists(t, 8) {
		t.Fatal("rolled-back write committed")
	}

	c, _, tx := f.begin(t, "ignores")
	if err := tx.Commit(t.Context(), completion(result(200), t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if rec, ok, _ := f.s.Get(t.Context(), c.Ref(), t0); !ok || rec.State != store.Completed {
		t.Fatalf("record = %+v", rec)
	}

	if _, ok := Tx(context.Background()); ok {
		t.Fatal("Tx found a transaction in a bare context")
	}
	var _ pgx.Tx = htx
}

// Many concurrent exactly-once requests on one small pool: every one
// commits its row and its record, and the pool's connections all come
// back.
func TestExactlyOnceConcurrent(t *testing.T) {
	f := newTxFixture(t)
	done := make(chan struct{})
	for i := range 32 {
		go func() {
			defer func() { done <- struct{}{} }()
			key := "c" + string(rune('A'+i))
			_, ctx, tx := f.begin(t, key)
			f.handler(t, ctx, 1000+i, key)
			if err := tx.Commit(t.Context(), completion(result(200), t0, t0.Add(time.Hour))); err != nil {
				t.Error(err)
			}
		}()
	}
	for range 32 {
		<-done
	}
	var n int
	if err := f.s.db.QueryRow(t.Context(), `SELECT count(*) FROM `+quoted(f.orders)).Scan(&n); err != nil || n != 32 {
		t.Fatalf("orders = %d, %v", n, err)
	}
}

// Serializable transactions: two requests that each read the orders and
// write one conflict; one commits, the other's COMMIT fails, nothing of it
// remains and its record stays in progress for the engine to release.
func TestExactlyOnceSerializable(t *testing.T) {
	f := newTxFixture(t)
	s := f.s.WithTxOptions(pgx.TxOptions{IsoLevel: pgx.Serializable})
	f.s = s
	type req struct {
		c   store.Claim
		ctx context.Context
		tx  store.Tx
	}
	var reqs []req
	for i, key := range []string{"s1", "s2"} {
		c, ctx, tx := f.begin(t, key)
		reqs = append(reqs, req{c, ctx, tx})
		htx, _ := Tx(ctx)
		var n int
		if err := htx.QueryRow(ctx, `SELECT count(*) FROM `+quoted(f.orders)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if _, err := htx.Exec(ctx, `INSERT INTO `+quoted(f.orders)+` (id, ref) VALUES ($1, $2)`, 10+i, key); err != nil {
			t.Fatal(err)
		}
	}
	var failed int
	for _, r := range reqs {
		if err := r.tx.Commit(t.Context(), completion(result(201), t0, t0.Add(time.Hour))); err != nil {
			t.Logf("%s: %v", r.c.Key, err)
			failed++
			rec, ok, _ := s.Get(t.Context(), r.c.Ref(), t0)
			if !ok || rec.State != store.InProgress {
				t.Errorf("%s: record %+v after a failed commit", r.c.Key, rec)
			}
		}
	}
	if failed != 1 {
		t.Fatalf("%d commits failed, want 1", failed)
	}
	if f.orderExists(t, 10) == f.orderExists(t, 11) {
		t.Fatal("want exactly one order")
	}
}

// BeginTx's context bounds only the start: cancelling it afterwards, as
// the engine does with its store timeout, leaves the transaction usable.
func TestExactlyOnceBeginContext(t *testing.T) {
	f := newTxFixture(t)
	c := claimAt("k", "fp", "tok", t0, time.Minute)
	if res, err := f.s.Claim(t.Context(), c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	bctx, cancel := context.WithTimeout(t.Context(), time.Second)
	tx, err := f.s.BeginTx(bctx, c.Hold())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	f.handler(t, tx.Context(t.Context()), 1, "a")
	if err := tx.Commit(t.Context(), completion(result(200), t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if !f.orderExists(t, 1) {
		t.Fatal("order missing")
	}
	// An already-cancelled context fails BeginTx promptly.
	dead, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.s.BeginTx(dead, hold(c.Scope, "other", "tok")); err == nil {
		t.Fatal("BeginTx with a cancelled context succeeded")
	}
}

// A statement fails inside the handler's transaction. If the handler
// answers an error (a 409 here: the engine marks the completion Failed),
// that answer is stored and replayed without any of its writes; if it
// claims success, Commit fails.
func TestExactlyOnceFailedStatement(t *testing.T) {
	f := newTxFixture(t)
	if _, err := f.s.db.Exec(t.Context(), `INSERT INTO `+quoted(f.orders)+` (id, ref) VALUES (1, 'one')`); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		key      string
		failed   bool // the outcome says nothing happened (a 409)
		rollback bool // the handler rolls back instead of failing a statement
		stored   bool
	}{
		{"conflict", true, false, true},
		{"lies", false, false, false},
		{"rolled-back-409", true, true, true},
		{"rolled-back-200", false, true, false},
	} {
		t.Run(tc.key, func(t *testing.T) {
			c, ctx, tx := f.begin(t, tc.key)
			htx, _ := Tx(ctx)
			if _, err := htx.Exec(ctx, `INSERT INTO `+quoted(f.orders)+` (id, ref) VALUES (2, $1)`, tc.key); err != nil {
				t.Fatal(err)
			}
			if tc.rollback {
				if err := htx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
			} else if _, err := htx.Exec(ctx, `INSERT INTO `+quoted(f.orders)+` (id, ref) VALUES (1, 'dup')`); err == nil {
				t.Fatal("duplicate insert succeeded")
			}
			done := completion(result(i), t0, t0.Add(time.Hour))
			done.Failed = tc.failed
			err := tx.Commit(t.Context(), done)
			rec, ok, _ := f.s.Get(t.Context(), c.Ref(), t0)
			if tc.stored {
				if err != nil || !ok || rec.State != store.Completed || !reflect.DeepEqual(rec.Result, done.Result) {
					t.Fatalf("commit = %v, record %+v", err, rec)
				}
			} else if err == nil || errors.Is(err, store.ErrLeaseLost) || rec.State != store.InProgress {
				t.Fatalf("commit = %v, record %+v; want a failed commit", err, rec)
			}
			if err := tx.Rollback(t.Context()); err != nil {
				t.Fatal(err)
			}
			if f.orderExists(t, 2) {
				t.Fatal("a write of the failed transaction was committed")
			}
		})
	}
}

// The handler ends the transaction itself with a COMMIT or ROLLBACK
// statement: the connection is then outside any transaction block, and
// the record must not be written on it (it would commit on its own, apart
// from the business writes). Commit treats the transaction as failed.
func TestExactlyOnceHandlerEndsTx(t *testing.T) {
	f := newTxFixture(t)
	for i, tc := range []struct {
		key    string
		stmt   string
		failed bool // the outcome says nothing happened (a 409)
		stored bool // the answer is stored on its own (a failed outcome)
	}{
		{"commit-201", "COMMIT", false, false},
		{"rollback-201", "ROLLBACK", false, false},
		{"end-200", "END", false, false},
		{"commit-409", "COMMIT", true, true},
		// A new transaction begun after the handler's end is not the
		// one that holds the record: completing in it would commit a
		// success whose writes were rolled back.
		{"rollback-begin-201", "ROLLBACK; BEGIN", false, false},
		{"rollback-chain-201", "ROLLBACK AND CHAIN", false, false},
		{"commit-begin-201", "COMMIT; BEGIN", false, false},
		{"rollback-begin-409", "ROLLBACK; BEGIN", true, true},
	} {
		t.Run(tc.key, func(t *testing.T) {
			id := 50 + i
			c, ctx, tx := f.begin(t, tc.key)
			f.handler(t, ctx, id, tc.key)
			htx, _ := Tx(ctx)
			for stmt := range strings.SplitSeq(tc.stmt, "; ") {
				if _, err := htx.Exec(ctx, stmt); err != nil {
					t.Fatal(err)
				}
			}
			done := completion(result(i), t0, t0.Add(time.Hour))
			done.Failed = tc.failed
			err := tx.Commit(t.Context(), done)
			rec, ok, gerr := f.s.Get(t.Context(), c.Ref(), t0)
			if gerr != nil || !ok {
				t.Fatalf("get = %v %v", ok, gerr)
			}
			if tc.stored {
				if err != nil || rec.State != store.Completed || !reflect.DeepEqual(rec.Result, done.Result) {
					t.Fatalf("commit = %v, record %+v", err, rec)
				}
			} else {
				if !errors.Is(err, sqlbase.ErrTxFailed) {
					t.Fatalf("commit = %v, want sqlbase.ErrTxFailed", err)
				}
				if rec.State != store.InProgress {
					t.Fatalf("record %+v was completed outside the transaction", rec)
				}
				if err := f.s.Release(t.Context(), c.Hold()); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Rollback(t.Context()); err != nil {
				t.Fatal(err)
			}
			// What the handler's own statement did stays done.
			if got, want := f.orderExists(t, id), !strings.HasPrefix(tc.stmt, "ROLLBACK"); got != want {
				t.Fatalf("order exists = %v, want %v", got, want)
			}
		})
	}
	// Every connection went back to the pool outside a transaction.
	p, _ := f.s.pool()
	for _, c := range p.AcquireAllIdle(t.Context()) {
		if st := c.Conn().PgConn().TxStatus(); st != 'I' {
			t.Errorf("pooled connection in transaction status %q", st)
		}
		c.Release()
	}
}

// Release of a record that is not there (never claimed, already
// released, deleted, or expired and swept) returns ErrLeaseLost.
func TestReleaseMissing(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	c := claimAt("k", "fp", "tok", t0, time.Minute)
	if err := s.Release(ctx, hold(c.Scope, "never", "tok")); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release of a key never claimed = %v", err)
	}
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if err := s.Release(ctx, c.Hold()); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, c.Hold()); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("second release = %v", err)
	}
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if ok, err := s.Delete(ctx, c.Ref()); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := s.Release(ctx, c.Hold()); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release after delete = %v", err)
	}
	for _, notify := range []bool{true, false} {
		s2, err := New(s.db, WithTable(s.Table()), WithNotify(notify))
		if err != nil {
			t.Fatal(err)
		}
		if err := s2.Release(ctx, c.Hold()); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("release (notify %v) = %v", notify, err)
		}
		s2.Close()
	}
}
