package pgxstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

// walMark is what the server reports about its writes at one moment.
// The pg_stat_wal counters are cluster-wide, but other backends report
// theirs at most once a second, while mark makes the test's own backend
// report at once; the insert position moves with everyone's WAL at once.
type walMark struct {
	records int64 // pg_stat_wal.wal_records
	fpi     int64 // pg_stat_wal.wal_fpi: full-page images
	bytes   int64 // pg_stat_wal.wal_bytes
	lsn     int64 // pg_current_wal_insert_lsn(), bytes
	nextXid int64 // the next transaction id to be assigned
	syncs   int64 // pg_stat_wal.wal_sync: WAL flushes to disk
	writes  int64 // pg_stat_wal.wal_write
}

func (a walMark) sub(b walMark) walMark {
	return walMark{a.records - b.records, a.fpi - b.fpi, a.bytes - b.bytes, a.lsn - b.lsn, a.nextXid - b.nextXid, a.syncs - b.syncs, a.writes - b.writes}
}

// quiet reports whether d, the difference of two marks around the test's
// own statements, saw no other session's WAL: the insert position moved
// by the bytes the test's backend reported, plus the alignment of each
// record and the page headers, and no more. Another session that wrote
// WAL moves the position without reporting (yet); one that reported moves
// the counters by more than it wrote meanwhile. Either way its flushes
// (which can also carry the test's commits) may be in the counters, so
// only a quiet difference tells what the test's own statements cost. A
// difference with full-page images (the first change to a page after a
// checkpoint, once per page and checkpoint) is not counted as quiet
// either: it tells about the checkpoint, not about the statements.
func (d walMark) quiet() bool {
	slack := 8*d.records + 40*(d.lsn/8192+2)
	return d.fpi == 0 && d.bytes <= d.lsn && d.lsn-d.bytes <= slack
}

// mark reads a walMark on the store's only connection. It first asks that
// backend to flush its pending statistics (pg_stat_wal is otherwise
// updated with a delay of up to a second or more), so the WAL its own
// statements wrote is counted.
func mark(t *testing.T, p *pgxpool.Pool) walMark {
	t.Helper()
	ctx := t.Context()
	if _, err := p.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	var m walMark
	err := p.QueryRow(ctx, `SELECT wal_records, wal_fpi, wal_bytes::bigint,
		pg_current_wal_insert_lsn() - '0/0'::pg_lsn,
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
		wal_sync, wal_write
		FROM pg_stat_wal`).Scan(&m.records, &m.fpi, &m.bytes, &m.lsn, &m.nextXid, &m.syncs, &m.writes)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// rowVersion identifies the physical row version of a record and whether
// a transaction has locked it (xmax is set by row locks as well as by
// updates and deletes).
func rowVersion(t *testing.T, s *Store, scope, key string) string {
	t.Helper()
	var v string
	err := s.db.QueryRow(t.Context(), `SELECT ctid::text || ' xmin=' || xmin::text || ' xmax=' || xmax::text
		FROM `+quoted(s.table)+` WHERE scope = $1 AND key = $2`, []byte(scope), key).Scan(&v)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestReplayWritesNothing checks that answering from the store (a replay,
// a 409 for an in-progress key, a claim with another fingerprint that the
// engine turns into a 422) writes nothing: no row version changes, no row
// lock, no transaction id, no WAL.
//
// The server is shared, so other sessions may write while we measure; they
// can only add to the counters. The claims run on a one-connection pool and
// the test compares N replays against N new claims on the same pool: each
// new claim costs at least one WAL record, one transaction id and tens of
// bytes, while N replays must cost (almost) none. A measurement disturbed
// by outside writes is retried; a store that writes on replay can never
// pass, since every attempt then shows at least N.
func TestReplayWritesNothing(t *testing.T) {
	p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	s := newStore(t, p, WithNotify(false))
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
	if err := s.Complete(ctx, hold(scope, "done", "t1"), completion(store.Result{Head: result(200).Head, Body: []byte("ok")}, t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	answers := func(n int) {
		for i := range n {
			for _, c := range []store.Claim{
				claimAt("done", "fp", "r"+strconv.Itoa(i), t0.Add(time.Second), time.Minute),    // replay
				claimAt("done", "other", "r"+strconv.Itoa(i), t0.Add(time.Second), time.Minute), // 422
				claimAt("busy", "fp", "r"+strconv.Itoa(i), t0.Add(time.Second), time.Minute),    // 409
			} {
				res, err := s.Claim(ctx, c)
				if err != nil || res.Acquired {
					t.Fatalf("claim = %+v, %v", res, err)
				}
			}
		}
	}
	answers(5) // warm up: set hint bits, prepare the statement
	versions := []string{rowVersion(t, s, scope, "done"), rowVersion(t, s, scope, "busy")}

	// Short windows of 20 rounds (60 claims, milliseconds), as many as 20
	// seconds allow, until one is quiet: the other test packages share the
	// server (an end-to-end test on PostgreSQL ran through five windows of
	// 300 claims once), while a store that wrote on replay would show at
	// least 60 records and transaction ids in every window.
	const n = 20 // rounds per window; 3n claims
	quiet := func(m walMark) bool { return m.records < n/4 && m.nextXid < n/4 && m.lsn < 8*n }
	var replay walMark
	deadline := time.Now().Add(20 * time.Second)
	for attempt := 0; ; attempt++ {
		m0 := mark(t, p)
		answers(n)
		replay = mark(t, p).sub(m0)
		if quiet(replay) || time.Now().After(deadline) {
			t.Logf("window %d: %d answered claims: %+v", attempt, 3*n, replay)
			break
		}
	}
	if !quiet(replay) {
		t.Errorf("%d answered claims wrote: %+v (every window for 20 s)", 3*n, replay)
	}
	after := []string{rowVersion(t, s, scope, "done"), rowVersion(t, s, scope, "busy")}
	for i := range versions {
		if versions[i] != after[i] || versions[i][len(versions[i])-7:] != " xmax=0" {
			t.Errorf("row version changed or locked: %s -> %s", versions[i], after[i])
		}
	}

	// The control: n new claims must show up in every counter, or the
	// measurement above proves nothing.
	m0 := mark(t, p)
	for i := range n {
		if res, err := s.Claim(ctx, claimAt("new"+strconv.Itoa(i), "fp", "t", t0, time.Minute)); err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	fresh := mark(t, p).sub(m0)
	t.Logf("control: %d new claims: %+v", n, fresh)
	if fresh.records < n || fresh.nextXid < n || fresh.lsn < 50*n {
		t.Errorf("%d new claims only showed %+v: the counters do not see writes", n, fresh)
	}

	// And the statement this design avoids is caught: an upsert whose DO
	// UPDATE ... WHERE is false still locks the live row, taking a
	// transaction id and writing WAL on every replay.
	naive := `INSERT INTO ` + quoted(s.table) + ` AS t (scope, key, fingerprint, token, state, created_at, lease_end, expires_at)
		VALUES ($1, $2, 'fp', 'x', 1, $3, $4, $4)
		ON CONFLICT (scope, key) DO UPDATE SET token = excluded.token WHERE t.expires_at <= $3
		RETURNING 1`
	m0 = mark(t, p)
	for range n {
		if _, err := p.Exec(ctx, naive, []byte(scope), "done", t0.Add(time.Second), t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	upsert := mark(t, p).sub(m0)
	t.Logf("naive ON CONFLICT DO UPDATE WHERE false, %d replays: %+v, row %s", n, upsert, rowVersion(t, s, scope, "done"))
	if upsert.nextXid < n || upsert.records < n {
		t.Errorf("the naive upsert went unnoticed: %+v", upsert)
	}
}
