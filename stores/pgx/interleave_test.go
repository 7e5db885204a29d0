package pgxstore

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
)

// These tests force, with a second transaction, the two interleavings in
// which a claim statement loses a race, and check that the claim then
// returns the winner's record (after re-running once) instead of the stale
// snapshot or an error.

// waitBlocked waits until some backend waits on a lock in the test DB.
func waitBlocked(t *testing.T, s *Store) {
	t.Helper()
	for range 500 {
		var n int
		if err := s.db.QueryRow(t.Context(),
			`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE 'WITH cur AS%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the claim never blocked")
}

func TestClaimLosesInsertRace(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	c := claimAt("k", "fp", "mine", t0, time.Minute)

	// A competitor inserts the row and has not committed yet.
	tx, err := s.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `INSERT INTO `+quoted(s.table)+` (scope, key, fingerprint, token, state, created_at, lease_end, expires_at)
		VALUES ($1, $2, 'winner', 'winner', 1, $3, $4, $4)`, []byte(c.Scope), c.Key, t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	before := claimRetries.Load()
	done := make(chan store.ClaimResult, 1)
	go func() {
		res, err := s.Claim(ctx, c) // snapshot without the row; ON CONFLICT waits for tx
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	waitBlocked(t, s)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.Acquired || res.Existing == nil || res.Existing.Fingerprint != "winner" {
		t.Fatalf("claim = %+v; want the winner's record", res)
	}
	if claimRetries.Load() == before {
		t.Error("the claim did not re-run its statement")
	}
}

func TestClaimLosesTakeoverRace(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	c := claimAt("k", "fp", "old", t0, time.Minute)
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	later := t0.Add(time.Hour) // the lease has ended

	// A competitor takes the abandoned row over and has not committed.
	tx, err := s.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `UPDATE `+quoted(s.table)+` SET fingerprint = 'winner', token = 'winner', created_at = $3, lease_end = $4, expires_at = $4
		WHERE scope = $1 AND key = $2`, []byte(c.Scope), c.Key, later, later.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	before := claimRetries.Load()
	done := make(chan store.ClaimResult, 1)
	go func() {
		// Its snapshot shows the abandoned row; the UPDATE waits for tx's
		// row lock, then re-checks and finds the row live.
		res, err := s.Claim(ctx, claimAt("k", "fp", "mine", later, time.Minute))
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	waitBlocked(t, s)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.Acquired || res.Existing == nil || res.Existing.Fingerprint != "winner" || !res.Existing.CreatedAt.Equal(later) {
		t.Fatalf("claim = %+v; want the winner's record", res)
	}
	if claimRetries.Load() == before {
		t.Error("the claim did not re-run its statement")
	}
}

// A takeover racing with a delete of a completed, expired record: the
// row the snapshot showed is gone when the UPDATE gets to it, and the
// re-run inserts. An abandoned in-progress record being deleted is
// locked FOR UPDATE like a claim a live exactly-once transaction holds:
// the claim cannot tell them apart, and answers with the record at once
// rather than wait (see claimSQL); once the DELETE has committed, the
// next claim inserts.
func TestClaimTakeoverRacesDelete(t *testing.T) {
	for _, completed := range []bool{true, false} {
		t.Run(map[bool]string{true: "completed", false: "in progress"}[completed], func(t *testing.T) {
			s := newStore(t, nil)
			ctx := t.Context()
			c := claimAt("k", "fp", "old", t0, time.Minute)
			if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			if completed {
				if err := s.Complete(ctx, c.Hold(), completion(result(200), t0, t0.Add(time.Minute))); err != nil {
					t.Fatal(err)
				}
			}
			later := t0.Add(time.Hour)
			tx, err := s.db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(ctx, `DELETE FROM `+quoted(s.table)+` WHERE scope = $1 AND key = $2`, []byte(c.Scope), c.Key); err != nil {
				t.Fatal(err)
			}
			done := make(chan store.ClaimResult, 1)
			go func() {
				res, err := s.Claim(ctx, claimAt("k", "fp", "mine", later, time.Minute))
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			if !completed {
				if res := <-done; res.Acquired || res.Existing == nil || res.Existing.State != store.InProgress {
					t.Fatalf("claim during the DELETE = %+v; want the in-progress record", res)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if res, err := s.Claim(ctx, claimAt("k", "fp", "mine", later, time.Minute)); err != nil || !res.Acquired {
					t.Fatalf("claim after the DELETE = %+v, %v; want acquired", res, err)
				}
				return
			}
			waitBlocked(t, s)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if res := <-done; !res.Acquired {
				t.Fatalf("claim = %+v; want acquired", res)
			}
		})
	}
}
