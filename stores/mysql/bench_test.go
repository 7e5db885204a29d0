package mysqlstore

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// The benchmarks run one request at a time on one pool, in one process,
// so their ratios compare the store's statements with the cheapest single
// statements that could take a key and read it back:
//
//	go test -run '^$' -bench Ratio -count 10 | benchstat -
//
// Targets: a first request (claim and complete) ≤ 2.2 × a bare INSERT,
// a replay ≤ 1.2 × a bare primary-key SELECT.

func benchStore(b *testing.B) (*Store, *sql.DB) {
	db := newDB(b, 2)
	return newStore(b, db, WithSweepInterval(0)), db
}

// benchResp is about the size of a JSON answer's result: a head holding
// a status and a Content-Type (its bytes are opaque to the store), and a
// body.
var benchResp = result("\x01\xc9\x01\x01\x01\x0cContent-Type\x01\x10application/json", `{"id":"ord_123","status":"paid","amount":4200}`)

var benchScope = idem.Scope("", "POST", "/orders")

const benchFP = "3c9e5a2b0f6d4e8a9b7c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f2a"

// bareInsert is one INSERT of a claim into the store's table, written the
// way the store writes its statements.
func bareInsert(s *Store, key string, now time.Time) string {
	return compile("INSERT INTO {{t}} (scope, `key`, fingerprint, token, state, created_at, lease_end, expires_at) VALUES (:scope, :key, :fp, :token, 1, :now, :lease, :lease)",
		quoteIdent(s.table), "scope", "key", "fp", "token", "now", "lease").
		render(benchScope, key, benchFP, "0123456789abcdef0123456789abcdef", now.UnixMicro(), now.Add(time.Minute).UnixMicro())
}

// bareSelect is one primary-key SELECT of the record's columns.
func bareSelect(s *Store, key string) string {
	return s.q.selectRecord.render(benchScope, key)
}

func claim(key, token string, now time.Time) store.Claim {
	return store.Claim{Scope: benchScope, Key: key, Fingerprint: benchFP, Token: token, Now: now, LeaseEnd: now.Add(time.Minute)}
}

func BenchmarkClaimComplete(b *testing.B) {
	s, _ := benchStore(b)
	ctx := b.Context()
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := "k" + strconv.Itoa(i)
		res, err := s.Claim(ctx, claim(key, "tok", now))
		if err != nil || !res.Acquired {
			b.Fatal(res, err)
		}
		if err := s.Complete(ctx, hold(benchScope, key, "tok"), completeAt(benchResp, now, now.Add(time.Hour))); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReplay(b *testing.B) {
	s, _ := benchStore(b)
	ctx := b.Context()
	now := time.Now()
	if _, err := s.Claim(ctx, claim("k", "tok", now)); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, hold(benchScope, "k", "tok"), completeAt(benchResp, now, now.Add(time.Hour))); err != nil {
		b.Fatal(err)
	}
	c := claim("k", "other", now)
	b.ReportAllocs()
	for b.Loop() {
		res, err := s.Claim(ctx, c)
		if err != nil || res.Acquired || res.Existing.State != store.Completed {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkBareInsert(b *testing.B) {
	s, db := benchStore(b)
	ctx := b.Context()
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := db.ExecContext(ctx, bareInsert(s, "k"+strconv.Itoa(i), now)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBareSelect(b *testing.B) {
	s, db := benchStore(b)
	ctx := b.Context()
	now := time.Now()
	if _, err := db.ExecContext(ctx, bareInsert(s, "k", now)); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, hold(benchScope, "k", "0123456789abcdef0123456789abcdef"), completeAt(benchResp, now, now.Add(time.Hour))); err != nil {
		b.Fatal(err)
	}
	q := bareSelect(s, "k")
	b.ReportAllocs()
	for b.Loop() {
		var r sqlbase.MicroRow
		if ok, err := r.Scan(db.QueryRowContext(ctx, q)); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkRatio measures the four operations alternately, in the same
// loop, so that a shared machine's noise hits all of them alike, and
// reports the ratios the targets are set for, of medians (a loaded
// machine's stalls would dominate the means): first/insert (a claim and
// a complete against a bare INSERT) and replay/select (a replayed claim
// against a bare primary-key SELECT of the same row). The replay and the
// SELECT swap places every other iteration, so neither always runs just
// after a commit.
func BenchmarkRatio(b *testing.B) {
	s, db := benchStore(b)
	ctx := b.Context()
	now := time.Now()
	if _, err := s.Claim(ctx, claim("replay", "tok", now)); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, hold(benchScope, "replay", "tok"), completeAt(benchResp, now, now.Add(time.Hour))); err != nil {
		b.Fatal(err)
	}
	replay := claim("replay", "other", now)
	sel := bareSelect(s, "replay")
	var tInsert, tFirst, tReplay, tSelect []time.Duration
	timed := func(into *[]time.Duration, f func()) {
		start := time.Now()
		f()
		*into = append(*into, time.Since(start))
	}
	doReplay := func() {
		if res, err := s.Claim(ctx, replay); err != nil || res.Acquired {
			b.Fatal(res, err)
		}
	}
	doSelect := func() {
		var r sqlbase.MicroRow
		if ok, err := r.Scan(db.QueryRowContext(ctx, sel)); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := "k" + strconv.Itoa(i)
		timed(&tInsert, func() {
			if _, err := db.ExecContext(ctx, bareInsert(s, "bare-"+key, now)); err != nil {
				b.Fatal(err)
			}
		})
		timed(&tFirst, func() {
			res, err := s.Claim(ctx, claim(key, "tok", now))
			if err != nil || !res.Acquired {
				b.Fatal(res, err)
			}
			if err := s.Complete(ctx, hold(benchScope, key, "tok"), completeAt(benchResp, now, now.Add(time.Hour))); err != nil {
				b.Fatal(err)
			}
		})
		if i%2 == 0 {
			timed(&tReplay, doReplay)
			timed(&tSelect, doSelect)
		} else {
			timed(&tSelect, doSelect)
			timed(&tReplay, doReplay)
		}
	}
	b.ReportMetric(float64(median(tFirst))/float64(median(tInsert)), "first/insert")
	b.ReportMetric(float64(median(tReplay))/float64(median(tSelect)), "replay/select")
	b.ReportMetric(float64(median(tInsert).Microseconds()), "µs-insert")
	b.ReportMetric(float64(median(tSelect).Microseconds()), "µs-select")
}

func median(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// BenchmarkSteps splits a first request into its statements, each timed
// beside a bare INSERT, and reports the medians: the claim's read of a
// missing key, its upsert, and the completion.
func BenchmarkSteps(b *testing.B) {
	s, db := benchStore(b)
	ctx := b.Context()
	now := time.Now()
	var tInsert, tRead, tTake, tComplete []time.Duration
	timed := func(into *[]time.Duration, q string) {
		start := time.Now()
		if _, err := db.ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(start))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := "k" + strconv.Itoa(i)
		timed(&tInsert, bareInsert(s, "bare-"+key, now))
		timed(&tRead, s.q.selectRecord.render(benchScope, key))
		timed(&tTake, s.q.take.render(benchScope, key, benchFP, "tok", now.UnixMicro(), now.Add(time.Minute).UnixMicro(), nil))
		start := time.Now()
		if err := s.Complete(ctx, hold(benchScope, key, "tok"), completeAt(benchResp, now, now.Add(time.Hour))); err != nil {
			b.Fatal(err)
		}
		tComplete = append(tComplete, time.Since(start))
	}
	ins := float64(median(tInsert))
	b.ReportMetric(float64(median(tRead))/ins, "read/insert")
	b.ReportMetric(float64(median(tTake))/ins, "upsert/insert")
	b.ReportMetric(float64(median(tComplete))/ins, "complete/insert")
}

// BenchmarkExactlyOnceFirst runs exactly-once first requests through the
// engine (Engine.Do, one at a time, unique keys, an order inserted in the
// transaction), claimed inside the transaction (ClaimTx: one durable
// commit) and, alternately in the same loop, claimed first and then begun
// (BeginTx, the engine's path for a store without ClaimTx: two), beside a
// bare INSERT. It reports the medians' ratios:
//
//	go test -run '^$' -bench ExactlyOnceFirst -count 8 | benchstat -
func BenchmarkExactlyOnceFirst(b *testing.B) {
	db := newDB(b, 4)
	s := newStore(b, db, WithSweepInterval(0))
	orders := randomTable()
	b.Cleanup(func() { dropTable(b, orders) })
	if _, err := db.ExecContext(b.Context(), "CREATE TABLE "+quoteIdent(orders)+" (id BIGINT PRIMARY KEY, ref VARCHAR(64) NOT NULL) ENGINE = InnoDB"); err != nil {
		b.Fatal(err)
	}
	insert := "INSERT INTO " + quoteIdent(orders) + " (id, ref) VALUES (?, ?)"
	engines := map[string]*idem.Engine{}
	for name, st := range map[string]idem.Store{"claimtx": s.ExactlyOnce(), "begintx": beginTxOnly{s.ExactlyOnce(), nil}} {
		e, err := idem.New(st, idem.WithLogger(quietLog))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close(context.Background()) })
		engines[name] = e
	}
	ctx := b.Context()
	var id int64
	first := func(e *idem.Engine, key string) {
		_, replayed, err := e.Do(ctx, idem.Op{Kind: "bench", Name: "order", Key: key, Fingerprint: benchFP}, func(ctx context.Context) ([]byte, error) {
			id++
			_, err := Tx(ctx).ExecContext(ctx, insert, id, key)
			return []byte(`{"id":"ord_123","status":"paid"}`), err
		})
		if err != nil || replayed {
			b.Fatal(replayed, err)
		}
	}
	var tInsert, tClaimTx, tBeginTx []time.Duration
	timed := func(into *[]time.Duration, f func()) {
		start := time.Now()
		f()
		*into = append(*into, time.Since(start))
	}
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		key := "k" + strconv.Itoa(i)
		timed(&tInsert, func() {
			if _, err := db.ExecContext(ctx, bareInsert(s, "bare-"+key, now)); err != nil {
				b.Fatal(err)
			}
		})
		if i%2 == 0 {
			timed(&tClaimTx, func() { first(engines["claimtx"], "c"+key) })
			timed(&tBeginTx, func() { first(engines["begintx"], "b"+key) })
		} else {
			timed(&tBeginTx, func() { first(engines["begintx"], "b"+key) })
			timed(&tClaimTx, func() { first(engines["claimtx"], "c"+key) })
		}
	}
	ins := float64(median(tInsert))
	b.ReportMetric(float64(median(tClaimTx))/ins, "claimtx/insert")
	b.ReportMetric(float64(median(tBeginTx))/ins, "begintx/insert")
	b.ReportMetric(float64(median(tClaimTx))/float64(median(tBeginTx)), "claimtx/begintx")
}
