package mysqlstore

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
)

// These tests force, with a second transaction, the interleavings in which
// a claim's read and its write see different rows, and check that the
// claim then returns the winner's record (after reading again) or takes
// the key, instead of returning the stale read or an error.

// waitBlocked waits until a transaction on the server waits for a row
// lock in a statement that starts with prefix.
func waitBlocked(t *testing.T, db *sql.DB, prefix string) {
	t.Helper()
	for range 50 {
		var n int
		if err := db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM information_schema.innodb_trx
			WHERE trx_state = 'LOCK WAIT' AND LEFT(trx_query, ?) = ?`, len(prefix), prefix).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		// InnoDB refreshes the table only when it was not read for 0.1s.
		time.Sleep(150 * time.Millisecond)
	}
	t.Fatal("the claim never waited for the lock")
}

// competitor starts a transaction that runs stmt (with args) and holds its
// locks until the test commits or rolls it back.
func competitor(t *testing.T, stmt string, args ...any) *sql.Tx {
	t.Helper()
	tx, err := newDB(t, 1).BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() })
	if _, err := tx.ExecContext(t.Context(), stmt, args...); err != nil {
		t.Fatal(err)
	}
	return tx
}

func claimAsync(t *testing.T, s *Store, c store.Claim) <-chan store.ClaimResult {
	done := make(chan store.ClaimResult, 1)
	go func() {
		res, err := s.Claim(context.Background(), c)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	return done
}

// The row of a competitor that inserted and has not committed: the
// claim's read does not see it, its upsert waits for the row lock, then
// leaves the committed row alone, and the claim reads it again.
func TestClaimLosesInsertRace(t *testing.T) {
	s := newStore(t, nil)
	c := claimAt("k", "fp", "mine", t0, time.Minute)
	tx := competitor(t, "INSERT INTO "+quoteIdent(s.table)+" (scope, `key`, fingerprint, token, state, created_at, lease_end, expires_at) VALUES (?, ?, 'winner', 'winner', 1, ?, ?, ?)",
		[]byte(c.Scope), c.Key, t0.UnixMicro(), t0.Add(time.Hour).UnixMicro(), t0.Add(time.Hour).UnixMicro())
	before := claimRetries.Load()
	done := claimAsync(t, s, c)
	waitBlocked(t, s.db, "INSERT INTO "+quoteIdent(s.table))
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.Acquired || res.Existing == nil || res.Existing.Fingerprint != "winner" {
		t.Fatalf("claim = %+v; want the winner's record", res)
	}
	if claimRetries.Load() == before {
		t.Error("the claim did not read again")
	}
}

// The competitor's insert rolls back: the waiting upsert inserts.
func TestClaimAfterInsertRollsBack(t *testing.T) {
	s := newStore(t, nil)
	c := claimAt("k", "fp", "mine", t0, time.Minute)
	tx := competitor(t, "INSERT INTO "+quoteIdent(s.table)+" (scope, `key`, fingerprint, token, state, created_at, lease_end, expires_at) VALUES (?, ?, 'winner', 'winner', 1, 0, 0, 0)",
		[]byte(c.Scope), c.Key)
	done := claimAsync(t, s, c)
	waitBlocked(t, s.db, "INSERT INTO "+quoteIdent(s.table))
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if res := <-done; !res.Acquired {
		t.Fatalf("claim = %+v; want acquired", res)
	}
}

// A competitor takes the abandoned row over and has not committed: the
// claim reads the abandoned row, its upsert waits, then finds the row
// live and leaves it, and the claim returns the competitor's record.
func TestClaimLosesTakeoverRace(t *testing.T) {
	s := newStore(t, nil)
	c := claimAt("k", "fp", "old", t0, time.Minute)
	if res, err := s.Claim(t.Context(), c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	later := t0.Add(time.Hour) // the lease has ended
	tx := competitor(t, "UPDATE "+quoteIdent(s.table)+" SET fingerprint = 'winner', token = 'winner', created_at = ?, lease_end = ?, expires_at = ? WHERE scope = ? AND `key` = ?",
		later.UnixMicro(), later.Add(time.Minute).UnixMicro(), later.Add(time.Minute).UnixMicro(), []byte(c.Scope), c.Key)
	before := claimRetries.Load()
	done := claimAsync(t, s, claimAt("k", "fp", "mine", later, time.Minute))
	waitBlocked(t, s.db, "INSERT INTO "+quoteIdent(s.table))
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.Acquired || res.Existing == nil || res.Existing.Fingerprint != "winner" || !res.Existing.CreatedAt.Equal(later) {
		t.Fatalf("claim = %+v; want the winner's record", res)
	}
	if claimRetries.Load() == before {
		t.Error("the claim did not read again")
	}
}

// A takeover racing with a delete: the row the claim read is gone when
// its upsert gets the lock, and the upsert inserts.
func TestClaimTakeoverRacesDelete(t *testing.T) {
	s := newStore(t, nil)
	c := claimAt("k", "fp", "old", t0, time.Minute)
	if res, err := s.Claim(t.Context(), c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	tx := competitor(t, "DELETE FROM "+quoteIdent(s.table)+" WHERE scope = ? AND `key` = ?", []byte(c.Scope), c.Key)
	done := claimAsync(t, s, claimAt("k", "fp", "mine", t0.Add(time.Hour), time.Minute))
	waitBlocked(t, s.db, "INSERT INTO "+quoteIdent(s.table))
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if res := <-done; !res.Acquired {
		t.Fatalf("claim = %+v; want acquired", res)
	}
}
