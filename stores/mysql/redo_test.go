package mysqlstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// redoCounters are the server-wide counters of the redo log's writes and
// of InnoDB's fsyncs: with innodb_flush_log_at_trx_commit = 1, each commit
// that wrote redo moves both by one, and a read moves neither.
var redoCounters = []string{"Innodb_log_writes", "Innodb_data_fsyncs"}

// TestRedoPerRequest counts the durable commits a first request costs on
// MySQL, as the log writes and fsyncs it makes the server do, next to a
// bare INSERT: a plain first request (the claim's INSERT, the
// completion's UPDATE) and an exactly-once one begun apart from its claim
// (BeginTx: the claim, then the transaction that commits the record) each
// cost two; an exactly-once one claimed in its transaction (ClaimTx, what
// the engine does) costs one, as one INSERT does. InnoDB has no per-session durability setting, so the claim cannot
// leave its flush to the completion, as pgxstore.WithAsyncClaims does on
// PostgreSQL. The counters are the server's, shared with other sessions,
// which can only add to them: each kind is measured in windows of n
// requests, one at a time, for up to 20 s, and the
// quietest window counts.
func TestRedoPerRequest(t *testing.T) {
	db := newDB(t, 4)
	var flushAtCommit int
	if err := db.QueryRowContext(t.Context(), "SELECT @@innodb_flush_log_at_trx_commit").Scan(&flushAtCommit); err != nil {
		t.Fatal(err)
	}
	if flushAtCommit != 1 {
		t.Skipf("innodb_flush_log_at_trx_commit is %d: commits are not flushed one by one, so there is nothing to count", flushAtCommit)
	}
	s := newStore(t, db, WithSweepInterval(0))
	eo := s.ExactlyOnce()
	ctx := t.Context()
	bare := "INSERT INTO " + quoteIdent(s.table) + " (scope, `key`, fingerprint, token, state, created_at, lease_end, expires_at) VALUES (?, ?, 'fp', 't', 1, 0, 1, 1)"
	scope := claimAt("", "", "", t0, 0).Scope
	seq, done := 0, "" // done: a completed key, to replay
	key := func(kind string) string { seq++; return kind + strconv.Itoa(seq) }
	kinds := []struct {
		name string
		want float64
		run  func() error
	}{
		{"bare INSERT", 1, func() error {
			_, err := db.ExecContext(ctx, bare, []byte(scope), key("bare"))
			return err
		}},
		{"plain first request", 2, func() error {
			c := claimAt(key("plain"), "fp", "t", t0, time.Minute)
			if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
				return fmt.Errorf("claim: %v %v", res, err)
			}
			done = c.Key
			return s.Complete(ctx, hold(c.Scope, c.Key, c.Token), completeAt(result("\x01ok", "ok"), t0, t0.Add(time.Hour)))
		}},
		{"exactly-once, BeginTx", 2, func() error {
			c := claimAt(key("eo"), "fp", "t", t0, time.Minute)
			if res, err := eo.Claim(ctx, c); err != nil || !res.Acquired {
				return fmt.Errorf("claim: %v %v", res, err)
			}
			tx, err := eo.BeginTx(ctx, hold(c.Scope, c.Key, c.Token))
			if err != nil {
				return err
			}
			defer tx.Rollback(context.WithoutCancel(ctx))
			return tx.Commit(ctx, completeAt(result("\x01ok", "ok"), t0, t0.Add(time.Hour)))
		}},
		{"exactly-once, ClaimTx", 1, func() error {
			c := claimAt(key("eotx"), "fp", "t", t0, time.Minute)
			res, tx, err := eo.ClaimTx(ctx, c)
			if err != nil || !res.Acquired {
				return fmt.Errorf("claim: %v %v", res, err)
			}
			defer tx.Rollback(context.WithoutCancel(ctx))
			return tx.Commit(ctx, completeAt(result("\x01ok", "ok"), t0, t0.Add(time.Hour)))
		}},
		{"replay", 0, func() error {
			res, err := s.Claim(ctx, claimAt(done, "fp", "r", t0.Add(time.Second), time.Minute))
			if err == nil && res.Acquired {
				err = fmt.Errorf("a replay acquired the key")
			}
			return err
		}},
	}
	const n = 20
	for _, k := range kinds {
		best := map[string]float64{}
		deadline := time.Now().Add(20 * time.Second)
		for window := 0; ; window++ {
			before := status(t, db, "GLOBAL", redoCounters)
			for range n {
				if err := k.run(); err != nil {
					t.Fatalf("%s: %v", k.name, err)
				}
			}
			d := status(t, db, "GLOBAL", redoCounters).sub(before)
			quiet := true
			for _, name := range redoCounters {
				per := float64(d[name]) / n
				if v, ok := best[name]; !ok || per < v {
					best[name] = per
				}
				quiet = quiet && per <= k.want+0.1
			}
			if quiet || time.Now().After(deadline) {
				t.Logf("%-27s %.2f log writes, %.2f fsyncs per request (window %d)", k.name+":", best["Innodb_log_writes"], best["Innodb_data_fsyncs"], window)
				break
			}
		}
		for _, name := range redoCounters {
			// Never fewer than the commits made (a read writes no redo);
			// at most a tenth more, from another session in the window.
			if got := best[name]; got < k.want-0.05 || got > k.want+0.1 {
				t.Errorf("%s: %.2f %s per request, want %.0f", k.name, got, name, k.want)
			}
		}
	}
}
