package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// sessionCounters are the per-session status variables that count a
// session's statements and its row writes. They are exact: other
// sessions cannot disturb them.
var sessionCounters = []string{
	"Com_select", "Com_insert", "Com_update", "Com_delete", "Com_replace", "Com_insert_select",
	"Handler_write", "Handler_update", "Handler_delete", "Handler_read_key",
}

// globalCounters are server-wide counters that move on every write: rows
// written (MySQL), the redo log's sequence number and the next
// transaction id (MariaDB; read-only statements get no transaction id).
// Other sessions can only add to them.
var globalCounters = []string{
	"Innodb_rows_inserted", "Innodb_rows_updated", "Innodb_rows_deleted",
	"Innodb_lsn_current", "Innodb_max_trx_id",
}

type counters map[string]int64

func (a counters) sub(b counters) counters {
	d := counters{}
	for k, v := range a {
		d[k] = v - b[k]
	}
	return d
}

// status reads SHOW <scope> STATUS for names, on db's only connection
// when db has one, and adds the binary log position when logging is on.
func status(t *testing.T, db *sql.DB, scope string, names []string) counters {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SHOW "+scope+" STATUS WHERE Variable_name IN ('"+strings.Join(names, "','")+"')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	c := counters{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			t.Fatalf("%s = %q", name, value)
		}
		c[name] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if scope == "GLOBAL" {
		var logBin int
		if err := db.QueryRowContext(t.Context(), "SELECT @@log_bin").Scan(&logBin); err != nil {
			t.Fatal(err)
		}
		if logBin == 1 {
			// SHOW MASTER STATUS: File, Position, and more columns.
			rows, err := db.QueryContext(t.Context(), "SHOW MASTER STATUS")
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			cols, _ := rows.Columns()
			vals := make([]sql.RawBytes, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if rows.Next() {
				if err := rows.Scan(ptrs...); err != nil {
					t.Fatal(err)
				}
				pos, _ := strconv.ParseInt(string(vals[1]), 10, 64)
				c["binlog_position"] = pos
			}
		}
	}
	return c
}

// TestReplayWritesNothing checks that answering from the store (a replay,
// a 409 for an in-progress key, a claim with another fingerprint that the
// engine turns into a 422) is one SELECT per answer that writes nothing
// and locks nothing: no INSERT, UPDATE or DELETE statement, no handler
// write, no redo log record, no transaction id, no binary log event, no
// transaction left open, and no wait for a row another transaction holds
// locked.
//
// The session counters of the store's only connection are exact. The
// global ones are shared with other sessions, which can only add to them:
// the test compares N answers with N new claims, each of which costs at
// least one row, one transaction id and tens of bytes of redo, and
// retries a measurement disturbed from outside. A store that writes on
// replay cannot pass, since every attempt then shows at least N.
func TestReplayWritesNothing(t *testing.T) {
	db := newDB(t, 1)
	db.SetConnMaxLifetime(0)
	s := newStore(t, db, WithSweepInterval(0))
	ctx := t.Context()
	scope := claimAt("", "", "", t0, 0).Scope

	// A completed record and an in-progress one.
	done := claimAt("done", "fp", "t1", t0, time.Minute)
	busy := claimAt("busy", "fp", "t2", t0, time.Minute)
	for _, c := range []store.Claim{done, busy} {
		if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	if err := s.Complete(ctx, hold(scope, "done", "t1"), completeAt(result("\x01ok", "ok"), t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	const n = 100 // rounds; 3n answers
	answers := func(ctx context.Context, st *Store, rounds int) error {
		for i := range rounds {
			for _, c := range []store.Claim{
				claimAt("done", "fp", "r"+strconv.Itoa(i), t0.Add(time.Second), time.Minute),    // replay
				claimAt("done", "other", "r"+strconv.Itoa(i), t0.Add(time.Second), time.Minute), // 422
				claimAt("busy", "fp", "r"+strconv.Itoa(i), t0.Add(time.Second), time.Minute),    // 409
			} {
				res, err := st.Claim(ctx, c)
				if err != nil {
					return err
				}
				if res.Acquired {
					return errors.New("an answered claim acquired the key")
				}
			}
		}
		return nil
	}
	if err := answers(ctx, s, n); err != nil { // warm up
		t.Fatal(err)
	}

	// Session counters: exact.
	s0 := status(t, db, "SESSION", sessionCounters)
	if err := answers(ctx, s, n); err != nil {
		t.Fatal(err)
	}
	session := status(t, db, "SESSION", sessionCounters).sub(s0)
	t.Logf("%d answers moved the session counters by %v", 3*n, session)
	for name, d := range session {
		switch {
		case name == "Com_select" && d != 3*n:
			t.Errorf("%d answers ran %d SELECTs, want one each", 3*n, d)
		case name == "Handler_read_key" && d != 3*n:
			t.Errorf("%d answers made %d index lookups, want one each", 3*n, d)
		case name != "Com_select" && name != "Handler_read_key" && d != 0:
			t.Errorf("%d answers moved %s by %d, want 0", 3*n, name, d)
		}
	}
	var open int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID()").Scan(&open); err != nil {
		t.Fatal(err)
	}
	if open != 0 {
		t.Errorf("%d transactions left open after the answers", open)
	}

	// Global counters: shared with the other test packages, so measured
	// in short windows of w rounds (3w answers, milliseconds), as many as
	// 20 s allow, until one is quiet (five windows of 300 answers were all
	// disturbed once). A store that wrote on an answer would move them by
	// at least 3w in every window.
	const w = 20
	var global counters
	deadline := time.Now().Add(20 * time.Second)
	for attempt := 0; ; attempt++ {
		g0 := status(t, db, "GLOBAL", globalCounters)
		if err := answers(ctx, s, w); err != nil {
			t.Fatal(err)
		}
		global = status(t, db, "GLOBAL", globalCounters).sub(g0)
		if quiet(global, w) || time.Now().After(deadline) {
			t.Logf("window %d: %d answers moved the global counters by %v", attempt, 3*w, global)
			break
		}
	}
	if !quiet(global, w) {
		t.Errorf("%d answers moved the server's write counters by %v (every window for 20 s)", 3*w, global)
	}

	// The control: n new claims must show up in every counter, or the
	// measurements above prove nothing.
	g0 := status(t, db, "GLOBAL", globalCounters) // before: it runs a SELECT
	s0 = status(t, db, "SESSION", sessionCounters)
	for i := range n {
		if res, err := s.Claim(ctx, claimAt("new"+strconv.Itoa(i), "fp", "t", t0, time.Minute)); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	fresh := status(t, db, "SESSION", sessionCounters).sub(s0)
	freshGlobal := status(t, db, "GLOBAL", globalCounters).sub(g0)
	t.Logf("control: %d new claims: session %v, global %v", n, fresh, freshGlobal)
	if fresh["Com_select"] != n || fresh["Com_insert"] != n || fresh["Handler_write"] < n {
		t.Errorf("%d new claims only showed %v: the session counters do not see writes", n, fresh)
	}
	if quiet(freshGlobal, n) {
		t.Errorf("%d new claims only showed %v: the global counters do not see writes", n, freshGlobal)
	}

	// And the statement this design avoids is caught: an upsert whose
	// update changes nothing on a live row still counts as an INSERT and
	// a handler write, and it locks the row.
	naive := "INSERT INTO " + quoteIdent(s.table) + " (scope, `key`, fingerprint, token, state, created_at, lease_end, expires_at)" +
		" VALUES (?, 'done', 'fp', 'x', 1, 0, 0, 0) ON DUPLICATE KEY UPDATE token = IF(expires_at <= 0, VALUES(token), token)"
	s0 = status(t, db, "SESSION", sessionCounters)
	for range n {
		if _, err := db.ExecContext(ctx, naive, []byte(scope)); err != nil {
			t.Fatal(err)
		}
	}
	upsert := status(t, db, "SESSION", sessionCounters).sub(s0)
	t.Logf("naive upsert on a live row, %d times: %v", n, upsert)
	if upsert["Com_insert"] < n {
		t.Errorf("the naive upsert went unnoticed: %v", upsert)
	}

	// No lock: with both rows locked exclusively by another transaction,
	// the answers do not wait, while the naive upsert does.
	tx, err := newDB(t, 1).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var locked int
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+quoteIdent(s.table)+" WHERE `key` IN ('done', 'busy') FOR UPDATE").Scan(&locked); err != nil || locked != 2 {
		t.Fatal(locked, err)
	}
	other, err := New(newDB(t, 2), WithTable(s.table), WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := answers(actx, other, n); err != nil {
		t.Fatalf("answers beside a transaction that holds both rows: %v", err)
	}
	t.Logf("%d answers beside a transaction holding both rows took %v", 3*n, time.Since(start))
	nctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := other.db.ExecContext(nctx, naive, []byte(scope)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the naive upsert beside the lock: %v, want it to wait until the deadline", err)
	}
}

// quiet reports whether the global counters moved by much less than n
// writes would move them.
func quiet(g counters, n int64) bool {
	for name, d := range g {
		limit := n / 4
		if name == "Innodb_lsn_current" || name == "binlog_position" {
			limit = 8 * n // bytes
		}
		if d >= limit {
			return false
		}
	}
	return true
}

// TestExtendBatchTwoStatements: the heartbeat's extends of many claims
// cost one UPDATE and one SELECT in all, not a statement per claim, and
// each claim still gets its own answer.
func TestExtendBatchTwoStatements(t *testing.T) {
	db := newDB(t, 1) // one session: its counters are this test's alone
	s := newStore(t, db)
	ctx := t.Context()
	now := time.Now()
	const n = 20
	xs := make([]store.Extension, n)
	for i := range xs {
		c := claimAt("k"+strconv.Itoa(i), "fp", "tok"+strconv.Itoa(i), now, time.Minute)
		if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
		xs[i] = store.Extension{Hold: c.Hold(), LeaseEnd: now.Add(time.Hour)}
	}
	// Two claims are no longer held: one released, one with a stale token.
	if err := s.Release(ctx, xs[3].Hold); err != nil {
		t.Fatal(err)
	}
	xs[7].Token = "someone else"
	s0 := status(t, db, "SESSION", sessionCounters)
	errs := s.ExtendBatch(ctx, now, xs)
	d := status(t, db, "SESSION", sessionCounters).sub(s0)
	for i, err := range errs {
		lost := i == 3 || i == 7
		if lost && !errors.Is(err, store.ErrLeaseLost) || !lost && err != nil {
			t.Errorf("claim %d: %v", i, err)
		}
	}
	if d["Com_update"] != 1 || d["Com_select"] != 1 {
		t.Errorf("%d extends ran %d UPDATEs and %d SELECTs, want 1 and 1", n, d["Com_update"], d["Com_select"])
	}
	rec, ok, err := s.Get(ctx, xs[5].Ref, now)
	if err != nil || !ok || !rec.LeaseEnd.Equal(sqlbase.CeilMicro(now.Add(time.Hour))) {
		t.Errorf("extended record: %+v %v %v", rec, ok, err)
	}
}

// TestExtendBatchPastATakeover: a claim in the batch that another engine
// took over, and whose exactly-once transaction now holds the row's lock,
// neither holds up the other claims' extends nor passes for held; two
// claims on one record (the stale one and the one that took over) each
// get their own answer.
func TestExtendBatchPastATakeover(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	now := time.Now().UTC()
	stale := claimAt("k1", "fp", "tokA", now, time.Second)
	other := claimAt("k2", "fp", "tokC", now, time.Minute)
	for _, c := range []store.Claim{stale, other} {
		if r, err := s.Claim(ctx, c); err != nil || !r.Acquired {
			t.Fatal(r, err)
		}
	}
	later := now.Add(2 * time.Second)
	taker := claimAt("k1", "fp", "tokB", later, time.Minute)
	if r, err := s.Claim(ctx, taker); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	lease := later.Add(time.Minute)
	errs := s.ExtendBatch(ctx, later, []store.Extension{
		{Hold: stale.Hold(), LeaseEnd: lease}, {Hold: taker.Hold(), LeaseEnd: lease}, {Hold: other.Hold(), LeaseEnd: lease},
	})
	if !errors.Is(errs[0], store.ErrLeaseLost) || errs[1] != nil || errs[2] != nil {
		t.Errorf("stale, taker, other: %v; want ErrLeaseLost, nil, nil", errs)
	}

	tx, err := s.ExactlyOnce().BeginTx(ctx, taker.Hold())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	errs = s.ExtendBatch(bctx, later, []store.Extension{
		{Hold: stale.Hold(), LeaseEnd: lease.Add(time.Second)}, {Hold: other.Hold(), LeaseEnd: lease.Add(time.Second)},
	})
	if !errors.Is(errs[0], store.ErrLeaseLost) || errs[1] != nil {
		t.Errorf("beside a transaction that holds a taken-over claim: %v; want ErrLeaseLost, nil", errs)
	}
}
