package pgxstore

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Every statement works in each of pgx's query exec modes, including the
// simple protocol that PgBouncer in transaction mode needs, also where the
// session defaults to SERIALIZABLE and the store sends its statements in
// READ COMMITTED batches.
func TestQueryExecModes(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement,
		pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec,
		pgx.QueryExecModeSimpleProtocol,
	} {
		for _, level := range []string{"", "serializable"} {
			name := mode.String()
			if level != "" {
				name += "/" + level
			}
			t.Run(name, func(t *testing.T) { testQueryExecMode(t, mode, level) })
		}
	}
}

func testQueryExecMode(t *testing.T, mode pgx.QueryExecMode, level string) {
	p := newPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DefaultQueryExecMode = mode
		if level != "" {
			c.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
		}
	})
	s := newStore(t, p)
	ctx := t.Context()
	c := store.Claim{Scope: "4:acme4:POST7:/o/{id}", Key: "k", Fingerprint: "\x00f\xff", Token: "t\x00", Now: t0, LeaseEnd: t0.Add(time.Minute)}
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	if err := s.Extend(ctx, c.Hold(), t0, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Bytes that the text and simple protocols must escape: NUL, a
	// backslash, non-UTF-8.
	resp := store.Result{Head: []byte{1, 0, '\\', 'x', 0xff}, Body: []byte{0, 1, 2, '\\', 'x'}}
	if err := s.Complete(ctx, c.Hold(), completion(resp, t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, c)
	if err != nil || res.Acquired || !reflect.DeepEqual(res.Existing.Result, resp) || res.Existing.Fingerprint != c.Fingerprint {
		t.Fatalf("replay = %+v %v", res.Existing, err)
	}
	if err := s.Release(ctx, c.Hold()); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatal(err)
	}
	if n, err := s.DeleteExpired(ctx, t0.Add(time.Hour)); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if ok, err := s.Delete(ctx, c.Ref()); err != nil || ok {
		t.Fatal(ok, err)
	}
	eo := s.ExactlyOnce()
	if res, err := eo.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	// The claim turned synchronous_commit off for its own
	// transaction only (the pool has one connection here).
	var sc string
	if err := p.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc); err != nil || sc != "on" {
		t.Fatalf("synchronous_commit after an exactly-once claim = %q, %v", sc, err)
	}
	tx, err := eo.BeginTx(ctx, c.Hold())
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, completion(resp, t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if s.strict.Load() != (level != "") {
		t.Errorf("statements in READ COMMITTED batches: %v, want %v", s.strict.Load(), level != "")
	}
}

// The background sweeper deletes expired rows on its own and stops on
// Close; Sweep stops when its context ends.
func TestSweeper(t *testing.T) {
	// Quiet: under load the first tick can come before CreateSchema.
	s := newStore(t, nil, WithSweepInterval(20*time.Millisecond), WithLogger(quietLog))
	ctx := t.Context()
	now := time.Now()
	for _, k := range []string{"a", "b"} {
		if _, err := s.Claim(ctx, claimAt(k, "fp", "t", now.Add(-time.Hour), time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Claim(ctx, claimAt("live", "fp", "t", now, time.Hour)); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var n int
		if err := s.db.QueryRow(ctx, "SELECT count(*) FROM "+quoted(s.table)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(5 * time.Second)
	for count() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows left; the sweeper did not run", count())
		}
		time.Sleep(20 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop the sweeper")
	}

	s2 := newStore(t, nil)
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := s2.Sweep(sctx, 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Sweep = %v", err)
	}
	s2.Close()
	if err := s2.Sweep(ctx, 10*time.Millisecond); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sweep after Close = %v", err)
	}
}

// The sweeper is on by default on a pool, and off on a connection (not
// safe for concurrent use) and with WithSweepInterval(0).
func TestSweeperDefault(t *testing.T) {
	p := newPool(t)
	c, err := pgx.Connect(t.Context(), testURL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, tc := range []struct {
		name string
		db   DB
		opts []Option
		want time.Duration
	}{
		{"pool", p, nil, DefaultSweepInterval},
		{"pool, off", p, []Option{WithSweepInterval(0)}, 0},
		{"pool, 1m", p, []Option{WithSweepInterval(time.Minute)}, time.Minute},
		{"conn", c, nil, 0},
		{"conn, 1m", c, []Option{WithSweepInterval(time.Minute)}, time.Minute},
	} {
		s, err := New(tc.db, tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if s.cfg.SweepInterval != tc.want {
			t.Errorf("%s: sweep interval %v, want %v", tc.name, s.cfg.SweepInterval, tc.want)
		}
		s.Close()
	}
}

// DeleteExpired reads the whole table, however many pages it has, and
// the sweeper goes round it, page range by page range, until no expired
// row is left; live rows stay.
func TestSweepCoversLargeTable(t *testing.T) {
	s := newStore(t, nil, WithLogger(quietLog))
	ctx := t.Context()
	// Every third row expired at now; the others live for an hour.
	const rows = 120000
	fill := func(prefix string, now time.Time) {
		t.Helper()
		if _, err := s.db.Exec(ctx, `INSERT INTO `+quoted(s.table)+` (scope, key, fingerprint, token, state, created_at, lease_end, expires_at, body)
			SELECT 's', $1::text || i, 'fp', 't', 1, $2::timestamptz, e, e, convert_to(repeat('x', 100), 'UTF8')
			FROM generate_series(1, $4::integer) AS i,
			LATERAL (SELECT CASE WHEN i % 3 = 0 THEN $2::timestamptz ELSE $3::timestamptz END AS e) AS x`,
			prefix, now.Add(-time.Minute), now.Add(time.Hour), rows); err != nil {
			t.Fatal(err)
		}
	}
	count := func(now time.Time) (all, expired int) {
		t.Helper()
		if err := s.db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE expires_at <= $1) FROM `+quoted(s.table), now).Scan(&all, &expired); err != nil {
			t.Fatal(err)
		}
		return all, expired
	}
	fill("a", t0)
	var pages int
	if err := s.db.QueryRow(ctx, `SELECT pg_relation_size($1::text::regclass) / 8192`, quoted(s.table)).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if pages <= 2*sweepPages {
		t.Fatalf("only %d pages: the test needs more than two sweep ranges", pages)
	}
	n, err := s.DeleteExpired(ctx, t0)
	if all, expired := count(t0); err != nil || n != rows/3 || all != 2*rows/3 || expired != 0 {
		t.Fatalf("DeleteExpired = %d, %v; %d rows left, %d expired", n, err, all, expired)
	}

	// The sweeper, on the wall clock: rows that expired long ago.
	now := time.Now()
	fill("b", now)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- s.Sweep(sctx, time.Millisecond) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		all, expired := count(now)
		if expired == 0 {
			if all != 4*rows/3 {
				t.Errorf("%d rows left, want the %d live ones", all, 4*rows/3)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d expired rows left after 20s", expired)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Sweep = %v", err)
	}
}
