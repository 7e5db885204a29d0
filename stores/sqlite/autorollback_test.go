package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// TestInterruptedTxIsNotCommitted: a handler statement interrupted by its
// request's context makes SQLite roll the whole transaction back, behind
// database/sql's back. The record must not then complete on its own as a
// success whose writes are gone; a failed outcome is stored on its own.
func TestInterruptedTxIsNotCommitted(t *testing.T) {
	for _, failed := range []bool{false, true} {
		s := newStore(t, nil)
		ctx := t.Context()
		if _, err := s.db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER)`); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		c := claimAt("k", "t1", now, time.Minute)
		if r, err := s.Claim(ctx, c); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
		tx, err := s.ExactlyOnce().BeginTx(ctx, c.Hold())
		if err != nil {
			t.Fatal(err)
		}
		sqlTx, _ := Tx(tx.Context(ctx))
		if _, err := sqlTx.ExecContext(ctx, `INSERT INTO orders VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		hctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = sqlTx.ExecContext(hctx, `INSERT INTO orders SELECT x FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 1000000000) SELECT x FROM c)`)
		cancel()
		if err == nil {
			t.Fatal("the slow statement was not interrupted")
		}
		d := done("order 1 placed", now, now.Add(time.Hour))
		d.Failed = failed
		err = tx.Commit(ctx, d)
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		rec, ok, gerr := s.Get(ctx, ref("k"), now)
		if gerr != nil {
			t.Fatal(gerr)
		}
		switch {
		case n != 0:
			t.Errorf("failed=%v: the interrupted transaction's write is there (%d rows)", failed, n)
		case !failed && (!errors.Is(err, sqlbase.ErrTxFailed) || !ok || rec.State != store.InProgress):
			t.Errorf("success after the interrupt: commit %v, record %v %v; want ErrTxFailed and the claim still in progress", err, ok, rec.State)
		case failed && (err != nil || !ok || rec.State != store.Completed):
			t.Errorf("failed outcome after the interrupt: commit %v, record %v %v; want it stored on its own", err, ok, rec.State)
		}
	}
}

// TestBatchAfterAutoRollback: a statement of a group-commit batch that
// fails with SQLITE_FULL rolls the whole transaction back. The batch's
// other writes must then neither be lost nor reported failed when they
// committed: each is run again on its own.
func TestBatchAfterAutoRollback(t *testing.T) {
	path := t.TempDir() + "/full.db"
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=max_page_count(300)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := newStore(t, db)
	ctx := t.Context()
	now := time.Now()
	if r, err := s.Claim(ctx, claimAt("b", "t", now, time.Minute)); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	if err := s.lock(ctx); err != nil { // the writes queue into one batch meanwhile
		t.Fatal(err)
	}
	type out struct {
		name string
		n    int64
		err  error
	}
	outs := make(chan out, 3)
	pending := func(n int) {
		for {
			s.batch.mu.Lock()
			l := len(s.batch.pending)
			s.batch.mu.Unlock()
			if l == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	claim := func(key string) func() (int64, error) {
		return func() (int64, error) {
			return s.write(ctx, s.q.claim, []byte("s"), []byte(key), []byte("f"), []byte("t"), now.UnixMicro(), now.Add(time.Minute).UnixMicro())
		}
	}
	args, _ := completion(hold("b", "t"), done(strings.Repeat("x", 4<<20), now, now.Add(time.Hour)))
	ops := []struct {
		name string
		f    func() (int64, error)
	}{
		{"claim a", claim("a")},
		{"complete b (too big)", func() (int64, error) { return s.write(ctx, s.q.complete, args...) }},
		{"claim c", claim("c")},
	}
	for i, op := range ops {
		go func() { n, err := op.f(); outs <- out{op.name, n, err} }()
		pending(i + 1)
	}
	s.unlock()
	got := map[string]out{}
	for range ops {
		o := <-outs
		got[o.name] = o
	}
	for _, k := range []string{"a", "c"} {
		o := got["claim "+k]
		rec, ok, err := s.Get(ctx, ref(k), now)
		if err != nil {
			t.Fatal(err)
		}
		if o.err != nil || o.n != 1 || !ok || rec.State != store.InProgress {
			t.Errorf("claim %s: n=%d err=%v; row found=%v %v; want it claimed and reported so", k, o.n, o.err, ok, rec.State)
		}
	}
	if o := got["complete b (too big)"]; o.err == nil || !strings.Contains(o.err.Error(), "full") {
		t.Errorf("the too-large completion: n=%d err=%v, want the disk-full error", o.n, o.err)
	}
}
