package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	idem "github.com/idemkit/idem/core"
)

// txFixture is an exactly-once store and a business table "orders".
type txFixture struct {
	s      *ExactlyOnceStore
	orders string
}

func newTxFixture(t *testing.T, db *sql.DB) txFixture {
	t.Helper()
	s := newStore(t, db).ExactlyOnce()
	orders := randomTable()
	t.Cleanup(func() { dropTable(t, orders) })
	if _, err := s.db.ExecContext(t.Context(), "CREATE TABLE "+quoteIdent(orders)+
		" (id BIGINT PRIMARY KEY, ref VARCHAR(64) NOT NULL, UNIQUE KEY (ref)) ENGINE = InnoDB"); err != nil {
		t.Fatal(err)
	}
	return txFixture{s, orders}
}

func (f txFixture) orderExists(t *testing.T, id int) bool {
	t.Helper()
	var n int
	if err := f.s.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+quoteIdent(f.orders)+" WHERE id = ?", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// begin claims key and starts its transaction, as the engine does.
func (f txFixture) begin(t *testing.T, key string) (idem.Claim, context.Context, idem.Tx) {
	t.Helper()
	c := claimAt(key, "fp", "tok-"+key, t0, time.Minute)
	if res, err := f.s.Claim(t.Context(), c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	tx, err := f.s.BeginTx(t.Context(), c.Scope, c.Key, c.Token)
	if err != nil {
		t.Fatal(err)
	}
	return c, tx.Context(t.Context()), tx
}

// insert writes an order through the request's transaction.
func (f txFixture) insert(ctx context.Context, id int, ref string) error {
	tx := Tx(ctx)
	if tx == nil {
		return errors.New("no transaction in the request context")
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO "+quoteIdent(f.orders)+" (id, ref) VALUES (?, ?)", id, ref)
	return err
}

func TestExactlyOnceCommit(t *testing.T) {
	f := newTxFixture(t, nil)
	c, ctx, tx := f.begin(t, "k")
	if err := f.insert(ctx, 1, "a"); err != nil {
		t.Fatal(err)
	}
	if f.orderExists(t, 1) {
		t.Fatal("order visible before commit")
	}
	resp := idem.Response{Status: 201, Body: []byte("created")}
	if err := tx.Commit(t.Context(), resp, t0.Add(time.Second), t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatalf("rollback after commit: %v", err)
	}
	if !f.orderExists(t, 1) {
		t.Fatal("order missing after commit")
	}
	rec, ok, err := f.s.Get(t.Context(), c.Scope, c.Key, t0.Add(time.Second))
	if err != nil || !ok || rec.State != idem.StateCompleted || string(rec.Response.Body) != "created" {
		t.Fatalf("record = %+v %v %v", rec, ok, err)
	}
	if err := tx.Commit(t.Context(), resp, t0, t0.Add(time.Hour)); err == nil {
		t.Fatal("a second commit succeeded")
	}
	if Tx(context.Background()) != nil {
		t.Fatal("Tx found a transaction in a bare context")
	}
}

// A 5xx: the engine rolls back and releases; the key runs again.
func TestExactlyOnceRollback(t *testing.T) {
	f := newTxFixture(t, nil)
	c, ctx, tx := f.begin(t, "k")
	if err := f.insert(ctx, 1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatalf("second rollback: %v", err)
	}
	if err := f.s.Release(t.Context(), c.Scope, c.Key, c.Token); err != nil {
		t.Fatal(err)
	}
	if f.orderExists(t, 1) {
		t.Fatal("order survived rollback")
	}
	if res, err := f.s.Claim(t.Context(), claimAt("k", "fp", "again", t0, time.Minute)); err != nil || !res.Acquired {
		t.Fatalf("claim after release = %+v %v", res, err)
	}
}

// The lease ran out and another request took the key over while the
// handler ran: Commit returns ErrLeaseLost and the handler's writes are
// rolled back, so the work happens once even then.
func TestExactlyOnceLeaseLost(t *testing.T) {
	f := newTxFixture(t, nil)
	c, ctx, tx := f.begin(t, "k")
	if err := f.insert(ctx, 1, "a"); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(2 * time.Minute)
	if res, err := f.s.Claim(t.Context(), claimAt("k", "fp", "other", later, time.Minute)); err != nil || !res.Acquired {
		t.Fatalf("takeover = %+v %v", res, err)
	}
	err := tx.Commit(t.Context(), idem.Response{Status: 201}, later, later.Add(time.Hour))
	if !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("commit = %v, want ErrLeaseLost", err)
	}
	if f.orderExists(t, 1) {
		t.Fatal("order committed by a request that lost its claim")
	}
	if err := f.s.Release(t.Context(), c.Scope, c.Key, c.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("release by the old owner = %v", err)
	}
	// A claim nobody took over is still the token's at and past its lease
	// end: the late commit lands.
	_, _, tx2 := f.begin(t, "k2")
	if err := tx2.Commit(t.Context(), idem.Response{Status: 200}, t0.Add(time.Minute), t0.Add(time.Hour)); err != nil {
		t.Fatalf("commit at lease end = %v, want it to land", err)
	}
}

// The handler ends the transaction itself with the *sql.Tx's Rollback or
// Commit: the engine's commit treats it as failed, storing an error
// answer on its own and refusing a success.
func TestExactlyOnceHandlerEndsTx(t *testing.T) {
	f := newTxFixture(t, nil)
	for i, tc := range []struct {
		key    string
		end    string
		status int
		stored bool // the answer is stored on its own
		order  bool // the order was committed (by the handler's Commit)
	}{
		{"rollback-409", "rollback", 409, true, false},
		{"rollback-201", "rollback", 201, false, false},
		{"commit-201", "commit", 201, false, true},
	} {
		t.Run(tc.key, func(t *testing.T) {
			c, ctx, tx := f.begin(t, tc.key)
			if err := f.insert(ctx, 10+i, tc.key); err != nil {
				t.Fatal(err)
			}
			if tc.end == "commit" {
				Tx(ctx).Commit()
			} else {
				Tx(ctx).Rollback()
			}
			err := tx.Commit(t.Context(), idem.Response{Status: tc.status}, t0, t0.Add(time.Hour))
			rec, ok, gerr := f.s.Get(t.Context(), c.Scope, c.Key, t0)
			if gerr != nil || !ok {
				t.Fatalf("get = %v %v", ok, gerr)
			}
			if tc.stored {
				if err != nil || rec.State != idem.StateCompleted || rec.Response.Status != tc.status {
					t.Fatalf("commit = %v, record %+v", err, rec)
				}
			} else if !errors.Is(err, errTxFailed) || rec.State != idem.StateInProgress {
				t.Fatalf("commit = %v, record %+v; want errTxFailed and the claim in progress", err, rec)
			}
			if got := f.orderExists(t, 10+i); got != tc.order {
				t.Fatalf("order exists = %v, want %v", got, tc.order)
			}
			if err := tx.Rollback(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A statement that fails inside the transaction does not end it (MySQL
// rolls back the statement only): the handler may answer 409 and its
// other writes commit with the record.
func TestExactlyOnceFailedStatement(t *testing.T) {
	f := newTxFixture(t, nil)
	if _, err := f.s.db.ExecContext(t.Context(), "INSERT INTO "+quoteIdent(f.orders)+" (id, ref) VALUES (1, 'taken')"); err != nil {
		t.Fatal(err)
	}
	c, ctx, tx := f.begin(t, "k")
	if err := f.insert(ctx, 2, "mine"); err != nil {
		t.Fatal(err)
	}
	var me *mysql.MySQLError
	if err := f.insert(ctx, 3, "taken"); !errors.As(err, &me) || me.Number != 1062 {
		t.Fatalf("duplicate insert = %v", err)
	}
	if err := tx.Commit(t.Context(), idem.Response{Status: 409}, t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !f.orderExists(t, 2) || f.orderExists(t, 3) {
		t.Fatal("want order 2 committed and order 3 refused")
	}
	if rec, _, _ := f.s.Get(t.Context(), c.Scope, c.Key, t0); rec.State != idem.StateCompleted || rec.Response.Status != 409 {
		t.Fatalf("record %+v", rec)
	}
}

// Many concurrent exactly-once requests on a small pool: every one
// commits its row and its record, and the pool's connections come back.
func TestExactlyOnceConcurrent(t *testing.T) {
	f := newTxFixture(t, newDB(t, 8))
	done := make(chan error, 32)
	for i := range 32 {
		go func() {
			key := fmt.Sprint("c", i)
			c := claimAt(key, "fp", "t", t0, time.Minute)
			if _, err := f.s.Claim(t.Context(), c); err != nil {
				done <- err
				return
			}
			tx, err := f.s.BeginTx(t.Context(), c.Scope, c.Key, c.Token)
			if err != nil {
				done <- err
				return
			}
			if err := f.insert(tx.Context(t.Context()), 1000+i, key); err != nil {
				done <- err
				return
			}
			done <- tx.Commit(t.Context(), idem.Response{Status: 200}, t0, t0.Add(time.Hour))
		}()
	}
	for range 32 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	var n int
	if err := f.s.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+quoteIdent(f.orders)).Scan(&n); err != nil || n != 32 {
		t.Fatalf("orders = %d, %v", n, err)
	}
	if st := f.s.db.Stats(); st.InUse != 0 {
		t.Fatalf("%d connections still in use", st.InUse)
	}
}

// BeginTx's context bounds only the start: cancelling it afterwards, as
// the engine does with its store timeout, leaves the transaction usable.
func TestExactlyOnceBeginContext(t *testing.T) {
	f := newTxFixture(t, nil)
	c := claimAt("k", "fp", "tok", t0, time.Minute)
	if res, err := f.s.Claim(t.Context(), c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	bctx, cancel := context.WithTimeout(t.Context(), time.Second)
	tx, err := f.s.BeginTx(bctx, c.Scope, c.Key, c.Token)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := f.insert(tx.Context(t.Context()), 1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context(), idem.Response{Status: 200}, t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !f.orderExists(t, 1) {
		t.Fatal("order missing")
	}
	dead, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.s.BeginTx(dead, c.Scope, "other", "tok"); err == nil {
		t.Fatal("BeginTx with a cancelled context succeeded")
	}
}

// The handler's transaction runs at READ COMMITTED by default: a second
// read sees what another transaction committed after the first.
func TestExactlyOnceIsolation(t *testing.T) {
	f := newTxFixture(t, nil)
	for _, tc := range []struct {
		name string
		s    *ExactlyOnceStore
		want int
	}{
		{"default", f.s, 1},
		{"repeatable read", f.s.WithTxOptions(sql.TxOptions{Isolation: sql.LevelRepeatableRead}), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.s.db.ExecContext(t.Context(), "DELETE FROM "+quoteIdent(f.orders)); err != nil {
				t.Fatal(err)
			}
			c := claimAt(tc.name, "fp", "t", t0, time.Minute)
			if _, err := tc.s.Claim(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			tx, err := tc.s.BeginTx(t.Context(), c.Scope, c.Key, c.Token)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(t.Context())
			htx := Tx(tx.Context(t.Context()))
			var n int
			if err := htx.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+quoteIdent(f.orders)).Scan(&n); err != nil || n != 0 {
				t.Fatal(n, err)
			}
			if _, err := f.s.db.ExecContext(t.Context(), "INSERT INTO "+quoteIdent(f.orders)+" VALUES (1, 'x')"); err != nil {
				t.Fatal(err)
			}
			if err := htx.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+quoteIdent(f.orders)).Scan(&n); err != nil || n != tc.want {
				t.Fatalf("second read: %d %v, want %d", n, err, tc.want)
			}
		})
	}
}

// With MariaDB's innodb_snapshot_isolation on (the default from 11.6), a
// REPEATABLE READ transaction cannot update a row changed after its first
// read: the engine's heartbeat extending the lease meanwhile makes the
// completion fail with error 1020. READ COMMITTED, the default here, has
// no such snapshot, and the completion succeeds.
func TestExactlyOnceHeartbeatDuringHandler(t *testing.T) {
	db := newDB(t, 4, func(c *mysql.Config) { c.Params = map[string]string{"innodb_snapshot_isolation": "ON"} })
	var v sql.NullString
	if err := db.QueryRowContext(t.Context(), "SELECT @@innodb_snapshot_isolation").Scan(&v); err != nil {
		t.Skipf("no innodb_snapshot_isolation on this server: %v", err)
	}
	f := newTxFixture(t, db)
	for _, tc := range []struct {
		name string
		s    *ExactlyOnceStore
		ok   bool
	}{
		{"default", f.s, true},
		{"repeatable read", f.s.WithTxOptions(sql.TxOptions{Isolation: sql.LevelRepeatableRead}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claimAt(tc.name, "fp", "t", t0, time.Minute)
			if _, err := tc.s.Claim(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			tx, err := tc.s.BeginTx(t.Context(), c.Scope, c.Key, c.Token)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(t.Context())
			var n int
			if err := Tx(tx.Context(t.Context())).QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+quoteIdent(f.s.table)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if err := tc.s.Extend(t.Context(), c.Scope, c.Key, c.Token, t0, t0.Add(2*time.Minute)); err != nil {
				t.Fatal(err)
			}
			err = tx.Commit(t.Context(), idem.Response{Status: 200}, t0, t0.Add(time.Hour))
			if tc.ok != (err == nil) {
				t.Fatalf("commit = %v, want success %v", err, tc.ok)
			}
			t.Logf("commit: %v", err)
		})
	}
}
