package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// TestSweeperInterval: on a fake clock, the background sweeper deletes a
// record that has expired at its first tick after the expiry, not before,
// and keeps an abandoned claim for a lease after its lease end.
func TestSweeperInterval(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sweep.db")
	synctest.Test(t, func(t *testing.T) {
		db, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		s, err := New(db, WithLogger(quietLog), WithSweepInterval(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		if err := s.CreateSchema(ctx); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		claim := func(key string, lease time.Duration) {
			if res, err := s.Claim(ctx, claimAt(key, "t", now, lease)); err != nil || !res.Acquired {
				t.Fatalf("claim %s: %v %v", key, res, err)
			}
		}
		claim("done", time.Minute)
		if err := s.Complete(ctx, hold("done", "t"), done("ok", now, now.Add(90*time.Second))); err != nil {
			t.Fatal(err)
		}
		claim("abandoned", 30*time.Second) // removable a lease after its end: at 60 s
		has := func(key string) bool {
			var n int
			q := `SELECT count(*) FROM ` + quoteIdent(s.Table()) + ` WHERE "key" = ?`
			if err := db.QueryRowContext(ctx, q, []byte(key)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 1
		}
		for _, step := range []struct {
			at              time.Duration
			done, abandoned bool
		}{
			{59 * time.Second, true, true},
			{61 * time.Second, true, false}, // first tick (60 s): the abandoned claim goes
			{119 * time.Second, true, false},
			{121 * time.Second, false, false}, // second tick (120 s): the expired record goes
		} {
			time.Sleep(time.Until(now.Add(step.at)))
			synctest.Wait()
			if has("done") != step.done || has("abandoned") != step.abandoned {
				t.Fatalf("at %v: completed record kept %v, abandoned claim kept %v; want %v, %v",
					step.at, has("done"), has("abandoned"), step.done, step.abandoned)
			}
		}
	})
}
