package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
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

// ordersFor counts the committed orders of ref.
func (f txFixture) ordersFor(t *testing.T, ref string) int {
	t.Helper()
	var n int
	if err := f.s.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+quoteIdent(f.orders)+" WHERE ref = ?", ref).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
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
	// A test that fails before the transaction ends must not leave it
	// holding the table's metadata lock when the cleanup drops the table.
	t.Cleanup(func() { tx.Rollback(context.Background()) })
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
	resp := result("\x01created", "created")
	if err := tx.Commit(t.Context(), completeAt(resp, t0.Add(time.Second), t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatalf("rollback after commit: %v", err)
	}
	if !f.orderExists(t, 1) {
		t.Fatal("order missing after commit")
	}
	rec, ok, err := f.s.Get(t.Context(), c.Ref(), t0.Add(time.Second))
	if err != nil || !ok || rec.State != store.Completed || string(rec.Result.Body) != "created" {
		t.Fatalf("record = %+v %v %v", rec, ok, err)
	}
	if err := tx.Commit(t.Context(), completeAt(resp, t0, t0.Add(time.Hour))); err == nil {
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

// The lease ran out and another request took the key over before the
// transaction began: BeginTx fails with ErrLeaseLost and nothing is
// written. Once it began, the transaction holds the claim: a claim past
// the lease end answers with the record instead of taking it over, and
// the commit, late as it is, lands.
func TestExactlyOnceLeaseLost(t *testing.T) {
	f := newTxFixture(t, nil)
	c := claimAt("k", "fp", "tok", t0, time.Minute)
	if res, err := f.s.Claim(t.Context(), c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	later := t0.Add(2 * time.Minute)
	if res, err := f.s.Claim(t.Context(), claimAt("k", "fp", "other", later, time.Minute)); err != nil || !res.Acquired {
		t.Fatalf("takeover = %+v %v", res, err)
	}
	if tx, err := f.s.BeginTx(t.Context(), c.Hold()); !errors.Is(err, store.ErrLeaseLost) {
		if tx != nil {
			tx.Rollback(t.Context())
		}
		t.Fatalf("BeginTx after a takeover = %v, want ErrLeaseLost", err)
	}
	if err := f.s.Release(t.Context(), c.Hold()); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release by the old owner = %v", err)
	}
	if st := f.s.db.Stats(); st.InUse != 0 {
		t.Fatalf("%d connections still in use after the failed BeginTx", st.InUse)
	}

	c2, ctx, tx := f.begin(t, "k2")
	if err := f.insert(ctx, 1, "a"); err != nil {
		t.Fatal(err)
	}
	res, err := f.s.Claim(t.Context(), claimAt("k2", "fp", "other", later, time.Minute))
	if err != nil || res.Acquired || res.Existing.State != store.InProgress {
		t.Fatalf("claim past the lease end of a held claim = %+v %v, want the in-progress record", res, err)
	}
	if err := tx.Commit(t.Context(), completeAt(okResult, later, later.Add(time.Hour))); err != nil {
		t.Fatalf("late commit of a held claim = %v", err)
	}
	if !f.orderExists(t, 1) {
		t.Fatal("order missing after the late commit")
	}
	if rec, ok, err := f.s.Get(t.Context(), c2.Ref(), later); err != nil || !ok || rec.State != store.Completed {
		t.Fatalf("record after the late commit: %+v %v %v", rec, ok, err)
	}
}

// The handler ends the transaction itself, with the *sql.Tx's Rollback
// or Commit, or with ROLLBACK or COMMIT as SQL. After the methods the
// engine's commit is failed, storing a failed outcome (an HTTP 4xx) on
// its own and refusing a success. After ROLLBACK as SQL the record is not completed
// (the mark is gone, as after a deadlock); after COMMIT as SQL the record
// completes with what came after.
func TestExactlyOnceHandlerEndsTx(t *testing.T) {
	f := newTxFixture(t, nil)
	for i, tc := range []struct {
		key    string
		end    string
		failed bool  // the outcome is a failed one (a 409), not a success (a 201)
		stored bool  // the answer is stored
		err    error // else the commit's error
		order  bool  // the order was committed
	}{
		{"rollback-409", "rollback", true, true, nil, false},
		{"rollback-201", "rollback", false, false, sqlbase.ErrTxFailed, false},
		{"commit-201", "commit", false, false, sqlbase.ErrTxFailed, true},
		{"rollback-sql-201", "ROLLBACK", false, false, ErrRolledBack, false},
		{"commit-sql-201", "COMMIT", false, true, nil, true},
	} {
		t.Run(tc.key, func(t *testing.T) {
			c, ctx, tx := f.begin(t, tc.key)
			if err := f.insert(ctx, 10+i, tc.key); err != nil {
				t.Fatal(err)
			}
			switch tc.end {
			case "commit":
				Tx(ctx).Commit()
			case "rollback":
				Tx(ctx).Rollback()
			default:
				if _, err := Tx(ctx).ExecContext(ctx, tc.end); err != nil {
					t.Fatal(err)
				}
			}
			comp := completeAt(result("\x01"+tc.key, ""), t0, t0.Add(time.Hour))
			comp.Failed = tc.failed
			err := tx.Commit(t.Context(), comp)
			rec, ok, gerr := f.s.Get(t.Context(), c.Ref(), t0)
			if gerr != nil || !ok {
				t.Fatalf("get = %v %v", ok, gerr)
			}
			if tc.stored {
				if err != nil || rec.State != store.Completed || string(rec.Result.Head) != "\x01"+tc.key {
					t.Fatalf("commit = %v, record %+v", err, rec)
				}
			} else if !errors.Is(err, tc.err) || rec.State != store.InProgress {
				t.Fatalf("commit = %v, record %+v; want %v and the claim in progress", err, rec, tc.err)
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
	if err := tx.Commit(t.Context(), failedAt(result("\x01conflict", ""), t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if !f.orderExists(t, 2) || f.orderExists(t, 3) {
		t.Fatal("want order 2 committed and order 3 refused")
	}
	if rec, _, _ := f.s.Get(t.Context(), c.Ref(), t0); rec.State != store.Completed || string(rec.Result.Head) != "\x01conflict" {
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
			tx, err := f.s.BeginTx(t.Context(), c.Hold())
			if err != nil {
				done <- err
				return
			}
			if err := f.insert(tx.Context(t.Context()), 1000+i, key); err != nil {
				done <- err
				return
			}
			done <- tx.Commit(t.Context(), completeAt(okResult, t0, t0.Add(time.Hour)))
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
	tx, err := f.s.BeginTx(bctx, c.Hold())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := f.insert(tx.Context(t.Context()), 1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context(), completeAt(okResult, t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if !f.orderExists(t, 1) {
		t.Fatal("order missing")
	}
	dead, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := f.s.BeginTx(dead, hold(c.Scope, "other", "tok")); err == nil {
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
			tx, err := tc.s.BeginTx(t.Context(), c.Hold())
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
// REPEATABLE READ transaction cannot update a row another transaction
// changed after its first read (error 1020). A heartbeat extending the
// lease while the handler ran did that to the record; the transaction now
// holds its claim itself, so the engine sends none, and the completion
// succeeds at every isolation level after a handler that outlives its
// lease several times over.
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
	}{
		{"default", f.s},
		{"repeatable read", f.s.WithTxOptions(sql.TxOptions{Isolation: sql.LevelRepeatableRead})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var extends atomic.Int32
			e, err := idem.New(tc.s, idem.WithLogger(quietLog), idem.WithLease(300*time.Millisecond),
				idem.WithStoreObserver(func(_ context.Context, op idem.StoreOp, _ time.Duration, _ error) {
					if op == idem.StoreExtend {
						extends.Add(1)
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			h := e.Middleware()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var n int
				if err := Tx(r.Context()).QueryRowContext(r.Context(), "SELECT COUNT(*) FROM "+quoteIdent(f.s.table)).Scan(&n); err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
				time.Sleep(time.Second) // several beats of a 300ms lease
				w.WriteHeader(http.StatusCreated)
			}))
			req := httptest.NewRequest("POST", "/", nil)
			req.Header.Set("Idempotency-Key", strings.ReplaceAll(tc.name, " ", "-"))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusCreated {
				t.Fatalf("answer %d %s, want 201", w.Code, w.Body)
			}
			if n := extends.Load(); n != 0 {
				t.Errorf("the engine extended a claim its transaction holds %d times", n)
			}
		})
	}
}

// Every way a transaction ends gives its connection back to the pool as
// it found it: autocommit on, no transaction open, no user-level lock
// held, so the pool's next user (the store's own statements, which must
// commit on their own) is unaffected.
func TestExactlyOnceGivesConnectionsBack(t *testing.T) {
	db := newDB(t, 1)
	f := newTxFixture(t, db)
	ok := okResult
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, key string)
	}{
		{"commit", func(t *testing.T, key string) {
			_, _, tx := f.begin(t, key)
			if err := tx.Commit(t.Context(), completeAt(ok, t0, t0.Add(time.Hour))); err != nil {
				t.Fatal(err)
			}
		}},
		{"rollback", func(t *testing.T, key string) {
			_, _, tx := f.begin(t, key)
			if err := tx.Rollback(t.Context()); err != nil {
				t.Fatal(err)
			}
		}},
		{"bad result", func(t *testing.T, key string) {
			_, _, tx := f.begin(t, key)
			if err := tx.Commit(t.Context(), completeAt(store.Result{}, t0, t0.Add(time.Hour))); err == nil {
				t.Fatal("a result without a head was committed")
			}
		}},
		{"handler commits", func(t *testing.T, key string) {
			_, ctx, tx := f.begin(t, key)
			Tx(ctx).Commit()
			if err := tx.Commit(t.Context(), completeAt(ok, t0, t0.Add(time.Hour))); !errors.Is(err, sqlbase.ErrTxFailed) {
				t.Fatal(err)
			}
		}},
		{"server rolled back", func(t *testing.T, key string) {
			_, ctx, tx := f.begin(t, key)
			Tx(ctx).ExecContext(ctx, "ROLLBACK")
			if err := f.insert(ctx, 7, key); err != nil { // runs in a new transaction
				t.Fatal(err)
			}
			if err := tx.Commit(t.Context(), completeAt(ok, t0, t0.Add(time.Hour))); !errors.Is(err, ErrRolledBack) {
				t.Fatal(err)
			}
			if f.orderExists(t, 7) {
				t.Fatal("a write made after the rollback committed")
			}
		}},
		{"claim lost", func(t *testing.T, key string) {
			c := claimAt(key, "fp", "tok", t0, time.Minute)
			if _, err := f.s.Claim(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			if _, err := f.s.BeginTx(t.Context(), hold(c.Scope, c.Key, "another")); !errors.Is(err, store.ErrLeaseLost) {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, tc.name)
			var autocommit int
			var held sql.NullInt64
			if err := db.QueryRowContext(t.Context(), "SELECT @@autocommit").Scan(&autocommit); err != nil {
				t.Fatal(err)
			}
			scope := claimAt("", "", "", t0, 0).Scope
			holder := compile("SELECT IS_USED_LOCK("+holdName+")", quoteIdent(f.s.table), "table", "scope", "key")
			if err := db.QueryRowContext(t.Context(), holder.render(f.s.table, scopeKey(scope), tc.name)).Scan(&held); err != nil {
				t.Fatal(err)
			}
			var open int
			if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID()").Scan(&open); err != nil {
				t.Fatal(err)
			}
			if autocommit != 1 || held.Valid || open != 0 {
				t.Fatalf("the pool's connection: autocommit %d, lock held by %v, %d transactions open; want 1, none, 0", autocommit, held, open)
			}
			if st := db.Stats(); st.InUse != 0 {
				t.Fatalf("%d connections in use", st.InUse)
			}
		})
	}
}
