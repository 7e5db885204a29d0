package pgxstore

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
	"github.com/jackc/pgx/v5/pgxpool"
)

// claimers runs n concurrent claims of one key at now and returns how many
// acquired and the records the others got.
func claimers(t *testing.T, s *Store, n int, key string, now time.Time) (int, []*store.Record) {
	t.Helper()
	var (
		wg       sync.WaitGroup
		acquired atomic.Int32
		mu       sync.Mutex
		existing []*store.Record
		start    = make(chan struct{})
	)
	for i := range n {
		wg.Go(func() {
			<-start
			res, err := s.Claim(t.Context(), claimAt(key, "fp", "tok"+strconv.Itoa(i), now, time.Minute))
			if err != nil {
				t.Error(err)
				return
			}
			if res.Acquired {
				acquired.Add(1)
				return
			}
			mu.Lock()
			existing = append(existing, res.Existing)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	return int(acquired.Load()), existing
}

func racePool(t *testing.T) *pgxpool.Pool {
	// Enough connections that many claims really run at once, few enough
	// for a shared two-core machine.
	return newPool(t, func(c *pgxpool.Config) { c.MaxConns = 16 })
}

// Sixty-four claims of a new key: exactly one acquires, every other one
// gets the winner's in-progress record back.
func TestClaimRaceNewKey(t *testing.T) {
	s := newStore(t, racePool(t))
	for round := range 5 {
		key := "new-" + strconv.Itoa(round)
		won, existing := claimers(t, s, 64, key, t0)
		if won != 1 || len(existing) != 63 {
			t.Fatalf("round %d: %d acquired, %d existing; want 1 and 63", round, won, len(existing))
		}
		for _, r := range existing {
			if r == nil || r.State != store.InProgress || !r.ExpiresAt.After(t0) {
				t.Fatalf("round %d: existing %+v", round, r)
			}
		}
	}
}

// Sixty-four claims of a key whose record expired (completed, and
// abandoned in progress): exactly one takes it over, and the others see
// the new claim, never the stale record.
func TestClaimRaceExpiredRow(t *testing.T) {
	s := newStore(t, racePool(t))
	retries := claimRetries.Load()
	defer func() { t.Logf("%d claim statements re-run after a lost race", claimRetries.Load()-retries) }()
	ctx := t.Context()
	later := t0.Add(2 * time.Hour)
	for round := range 5 {
		for _, completed := range []bool{true, false} {
			key := "exp-" + strconv.Itoa(round) + "-" + strconv.FormatBool(completed)
			c := claimAt(key, "old", "old", t0, time.Minute)
			if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			if completed {
				if err := s.Complete(ctx, hold(c.Scope, key, "old"), completion(result(200), t0, t0.Add(time.Hour))); err != nil {
					t.Fatal(err)
				}
			}
			won, existing := claimers(t, s, 64, key, later)
			if won != 1 || len(existing) != 63 {
				t.Fatalf("%s: %d acquired, %d existing; want 1 and 63", key, won, len(existing))
			}
			for _, r := range existing {
				if r.State != store.InProgress || r.Fingerprint != "fp" || !r.CreatedAt.Equal(later) {
					t.Fatalf("%s: a loser saw %+v, not the winner's claim", key, r)
				}
			}
		}
	}
}

// Claims racing with each other and with DeleteExpired on a few hot keys
// whose claims are abandoned: the leases of the claims that acquired a key
// never overlap (each takeover happens at or after the previous lease
// end), and a claim never gets an expired record back.
func TestClaimRaceWithSweeper(t *testing.T) {
	s := newStore(t, racePool(t))
	ctx := t.Context()
	const lease = 20 * time.Millisecond
	type interval struct{ from, to time.Time }
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		held  = map[string][]interval{}
		stop  atomic.Bool
		takes atomic.Int32
	)
	for g := range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				key := "churn-" + strconv.Itoa((g+i)%3)
				n := time.Now()
				res, err := s.Claim(ctx, claimAt(key, "fp", strconv.Itoa(g)+"-"+strconv.Itoa(i), n, lease))
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Acquired {
					if !res.Existing.ExpiresAt.After(sqlbase.FloorMicro(n)) {
						t.Errorf("claim at %v returned expired record %+v", n, res.Existing)
					}
					continue
				}
				takes.Add(1)
				mu.Lock()
				held[key] = append(held[key], interval{sqlbase.FloorMicro(n), sqlbase.CeilMicro(n.Add(lease))})
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			// Sweep well behind the claimers' clocks, so a claim whose
			// timestamp was taken a little before it ran is still judged
			// against the record it raced with.
			if _, err := s.DeleteExpired(ctx, time.Now().Add(-500*time.Millisecond)); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	time.Sleep(2 * time.Second)
	stop.Store(true)
	wg.Wait()
	for key, ivs := range held {
		slices.SortFunc(ivs, func(a, b interval) int { return a.from.Compare(b.from) })
		for i := 1; i < len(ivs); i++ {
			if ivs[i].from.Before(ivs[i-1].to) {
				t.Errorf("%s: lease %v overlaps the previous one %v", key, ivs[i], ivs[i-1])
			}
		}
	}
	if takes.Load() < 10 {
		t.Errorf("only %d takeovers: the test did not exercise the race", takes.Load())
	}
	t.Logf("%d claims acquired", takes.Load())
}

// Under REPEATABLE READ or SERIALIZABLE as the server's default isolation,
// PostgreSQL answers a lost race with a serialization failure rather than
// re-checking the row; the store runs the statement again and the races
// come out the same.
func TestClaimRaceStrictIsolation(t *testing.T) {
	for _, level := range []string{"repeatable read", "serializable"} {
		t.Run(level, func(t *testing.T) {
			p := newPool(t, func(c *pgxpool.Config) {
				c.MaxConns = 16
				c.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
			})
			s := newStore(t, p)
			later := t0.Add(2 * time.Hour)
			for round := range 3 {
				key := "iso-" + strconv.Itoa(round)
				if won, existing := claimers(t, s, 64, key, t0); won != 1 || len(existing) != 63 {
					t.Fatalf("new key: %d acquired, %d existing", won, len(existing))
				}
				won, existing := claimers(t, s, 64, key, later)
				if won != 1 || len(existing) != 63 {
					t.Fatalf("expired key: %d acquired, %d existing", won, len(existing))
				}
				for _, r := range existing {
					if !r.CreatedAt.Equal(later) {
						t.Fatalf("a loser saw a stale record %+v", r)
					}
				}
			}
		})
	}
}
