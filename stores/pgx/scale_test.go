package pgxstore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// scaleEnv turns on the large tables of BenchmarkScale.
const scaleEnv = "IDEM_PGX_SCALE_BENCH"

// BenchmarkScale shows how the cost of a claim of a new key (durable, as
// in plain mode, and without waiting for the flush, as in exactly-once
// mode, which leaves what grows with the table) and of a replay of a
// random existing key grows with the table: it fills one
// table per size with completed records once, with COPY, then alternates
// claims and replays on every table in the same loop, so noise hits all
// sizes alike, and reports each size's latency over the smallest's. The
// tables are dropped at the end. By default the sizes are 10 thousand and
// 100 thousand rows; with IDEM_PGX_SCALE_BENCH=1 they are 10 thousand, 1
// million and 10 million (about 5 GB of disk and a few minutes to fill):
//
//	IDEM_PGX_SCALE_BENCH=1 go test -run '^$' -bench Scale -benchtime 20000x -count 5
//
// Target: a claim at 10 million rows within 1.5 times one at 10 thousand.
func BenchmarkScale(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if os.Getenv(scaleEnv) != "" {
		sizes = []int{10_000, 1_000_000, 10_000_000}
	}
	p := newPool(b, func(c *pgxpool.Config) { c.MaxConns = 2 })
	stores := make([]*Store, len(sizes))
	for i, n := range sizes {
		stores[i] = filledStore(b, p, n)
	}
	ctx := b.Context()
	scope := idem.Scope("", "POST", "/orders")
	claimT := make([]time.Duration, len(sizes))
	onceT := make([]time.Duration, len(sizes))
	replayT := make([]time.Duration, len(sizes))
	rng := rand.New(rand.NewPCG(1, 2))
	iters := 0
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		for j, s := range stores {
			c := store.Claim{Scope: scope, Key: benchKey(1<<40 + iters), Fingerprint: scaleFingerprint, Token: scaleToken, Now: now, LeaseEnd: now.Add(time.Minute)}
			t0 := time.Now()
			res, err := s.Claim(ctx, c)
			t1 := time.Now()
			if err != nil || !res.Acquired {
				b.Fatal(res, err)
			}
			c.Key = benchKey(1<<41 + iters)
			res, err = s.ExactlyOnce().Claim(ctx, c)
			t2 := time.Now()
			if err != nil || !res.Acquired {
				b.Fatal(res, err)
			}
			c.Key = benchKey(rng.IntN(sizes[j]))
			res, err = s.Claim(ctx, c)
			t3 := time.Now()
			if err != nil || res.Acquired || res.Existing.State != store.Completed {
				b.Fatal(res, err)
			}
			claimT[j] += t1.Sub(t0)
			onceT[j] += t2.Sub(t1)
			replayT[j] += t3.Sub(t2)
		}
		iters++
	}
	for j, n := range sizes {
		name := rowsLabel(n)
		b.ReportMetric(float64(claimT[j].Microseconds())/float64(iters), "µs-claim-"+name)
		b.ReportMetric(float64(onceT[j].Microseconds())/float64(iters), "µs-claim-nosync-"+name)
		b.ReportMetric(float64(replayT[j].Microseconds())/float64(iters), "µs-replay-"+name)
		if j > 0 {
			base := "/" + rowsLabel(sizes[0])
			b.ReportMetric(float64(claimT[j])/float64(claimT[0]), "claim-"+name+base)
			b.ReportMetric(float64(onceT[j])/float64(onceT[0]), "claim-nosync-"+name+base)
			b.ReportMetric(float64(replayT[j])/float64(replayT[0]), "replay-"+name+base)
		}
	}
}

func rowsLabel(n int) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000:
		return fmt.Sprintf("%dk", n/1_000)
	}
	return fmt.Sprint(n)
}

const (
	scaleFingerprint = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	scaleToken       = "0123456789abcdef0123456789abcdef"
)

// filledStore returns a store whose table holds n completed records with
// the keys benchKey(0) to benchKey(n-1), written with COPY into the table
// without its primary key, which is built afterwards (as a restore would),
// then vacuumed and analyzed. The table is dropped at cleanup.
func filledStore(b *testing.B, p *pgxpool.Pool, n int) *Store {
	b.Helper()
	s := newStore(b, p, WithNotify(false))
	ctx := b.Context()
	start := time.Now()
	c, err := p.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Release()
	t := quoted(s.Table())
	var pkey string
	if err := c.QueryRow(ctx, `SELECT conname FROM pg_constraint WHERE conrelid = $1::text::regclass AND contype = 'p'`, t).Scan(&pkey); err != nil {
		b.Fatal(err)
	}
	if _, err := c.Exec(ctx, `ALTER TABLE `+t+` DROP CONSTRAINT `+quoted(pkey)); err != nil {
		b.Fatal(err)
	}
	scope := []byte(idem.Scope("", "POST", "/orders"))
	created := time.Now()
	expires := created.Add(365 * 24 * time.Hour)
	i := 0
	rows := pgx.CopyFromFunc(func() ([]any, error) {
		if i == n {
			return nil, nil
		}
		row := []any{scope, benchKey(i), []byte(scaleFingerprint), []byte(scaleToken), created, int16(store.Completed),
			nil, expires, nil, false, benchResult.Head, benchResult.Body, false}
		i++
		return row, nil
	})
	cols := []string{"scope", "key", "fingerprint", "token", "created_at", "state",
		"lease_end", "expires_at", "status", "body_omitted", "headers", "body", "waiters"}
	if _, err := c.Conn().CopyFrom(ctx, pgx.Identifier{s.Table()}, cols, rows); err != nil {
		b.Fatal(err)
	}
	for _, stmt := range []string{
		`SET maintenance_work_mem = '512MB'`,
		`ALTER TABLE ` + t + ` ADD PRIMARY KEY (scope, key)`,
		`RESET maintenance_work_mem`,
		`VACUUM (ANALYZE) ` + t,
	} {
		if _, err := c.Exec(ctx, stmt); err != nil {
			b.Fatal(err)
		}
	}
	var size string
	if err := c.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size($1::text::regclass))`, t).Scan(&size); err != nil {
		b.Fatal(err)
	}
	b.Logf("%s rows: filled in %v, %s with its index", rowsLabel(n), time.Since(start).Round(time.Millisecond), size)
	return s
}
