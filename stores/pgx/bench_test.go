package pgxstore

import (
	"strconv"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The benchmarks run one request at a time on one pool, in one process,
// so their ratios compare the store's statements with the cheapest single
// statement that could take a key:
//
//	go test -run '^$' -bench . -count 5 | benchstat -
//
// Targets: ClaimComplete ≤ 2.2 × BareInsert (a first request is two
// committed writes), Replay ≤ 1.2 × BareInsert (in practice far less: a
// replay is a read and commits nothing).

func benchStore(b *testing.B, opts ...Option) (*Store, *pgxpool.Pool) {
	p := newPool(b, func(c *pgxpool.Config) { c.MaxConns = 2 })
	return newStore(b, p, opts...), p
}

var benchResp = idem.Response{
	Status: 201,
	Header: map[string][]string{"Content-Type": {"application/json"}},
	Body:   []byte(`{"id":"ord_123","status":"paid","amount":4200}`),
}

func benchClaimComplete(b *testing.B, opts ...Option) {
	s, _ := benchStore(b, opts...)
	ctx := b.Context()
	scope := idem.Scope("", "POST", "/orders")
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		key := "k" + strconv.Itoa(i)
		res, err := s.Claim(ctx, idem.Claim{Scope: scope, Key: key, Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)})
		if err != nil || !res.Acquired {
			b.Fatal(res, err)
		}
		if err := s.Complete(ctx, scope, key, "tok", benchResp, now, now.Add(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClaimComplete(b *testing.B)         { benchClaimComplete(b) }
func BenchmarkClaimCompleteNoNotify(b *testing.B) { benchClaimComplete(b, WithNotify(false)) }

func BenchmarkReplay(b *testing.B) {
	s, _ := benchStore(b)
	ctx := b.Context()
	scope := idem.Scope("", "POST", "/orders")
	now := time.Now()
	c := idem.Claim{Scope: scope, Key: "k", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)}
	if _, err := s.Claim(ctx, c); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, scope, "k", "tok", benchResp, now, now.Add(time.Hour)); err != nil {
		b.Fatal(err)
	}
	c.Token = "other"
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		res, err := s.Claim(ctx, c)
		if err != nil || res.Acquired || res.Existing.Response == nil {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkBareInsert is the yardstick: one INSERT ... ON CONFLICT ...
// RETURNING into the store's table for a new key.
func BenchmarkBareInsert(b *testing.B) {
	s, p := benchStore(b)
	ctx := b.Context()
	scope := []byte(idem.Scope("", "POST", "/orders"))
	now := time.Now()
	sql := `INSERT INTO ` + quoted(s.Table()) + ` (scope, key, fingerprint, token, state, created_at, lease_end, expires_at)
		VALUES ($1, $2, $3, $4, 1, $5, $6, $6) ON CONFLICT (scope, key) DO NOTHING RETURNING state`
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		var st int16
		if err := p.QueryRow(ctx, sql, scope, "k"+strconv.Itoa(i), []byte("fp"), []byte("tok"), now, now.Add(time.Minute)).Scan(&st); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBareSelect is a second yardstick for replays: one primary-key
// SELECT of the same row, the least any replay could cost.
func BenchmarkBareSelect(b *testing.B) {
	s, p := benchStore(b)
	ctx := b.Context()
	scope := idem.Scope("", "POST", "/orders")
	now := time.Now()
	if _, err := s.Claim(ctx, idem.Claim{Scope: scope, Key: "k", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)}); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, scope, "k", "tok", benchResp, now, now.Add(time.Hour)); err != nil {
		b.Fatal(err)
	}
	sql := `SELECT ` + recordCols + ` FROM ` + quoted(s.Table()) + ` WHERE scope = $1 AND key = $2`
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var r rawRecord
		if err := p.QueryRow(ctx, sql, []byte(scope), "k").Scan(&r.fingerprint, &r.state, &r.status, &r.headers, &r.body,
			&r.bodyOmitted, &r.createdAt, &r.leaseEnd, &r.expiresAt); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRatio measures the three operations alternately, in the same
// loop, so that a shared machine's noise (fsync latency varies by an order
// of magnitude here) hits all of them alike, and reports the ratios the
// issue sets targets for: first-request/bare (≤ 2.2) and replay/bare
// (≤ 1.2). Sub-benchmarks with notifications on (the default) and off.
func BenchmarkRatio(b *testing.B) {
	for _, notify := range []bool{true, false} {
		b.Run(map[bool]string{true: "notify", false: "nonotify"}[notify], func(b *testing.B) {
			s, p := benchStore(b, WithNotify(notify))
			ctx := b.Context()
			scope := idem.Scope("", "POST", "/orders")
			bscope := []byte(scope)
			now := time.Now()
			bare := `INSERT INTO ` + quoted(s.Table()) + ` (scope, key, fingerprint, token, state, created_at, lease_end, expires_at)
				VALUES ($1, $2, $3, $4, 1, $5, $6, $6) ON CONFLICT (scope, key) DO NOTHING RETURNING state`
			replay := idem.Claim{Scope: scope, Key: "replay", Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)}
			if _, err := s.Claim(ctx, replay); err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, scope, "replay", "tok", benchResp, now, now.Add(time.Hour)); err != nil {
				b.Fatal(err)
			}
			var tBare, tFirst, tReplay time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				key := "k" + strconv.Itoa(i)
				t0 := time.Now()
				var st int16
				if err := p.QueryRow(ctx, bare, bscope, "bare-"+key, []byte("fp"), []byte("tok"), now, now.Add(time.Minute)).Scan(&st); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				res, err := s.Claim(ctx, idem.Claim{Scope: scope, Key: key, Fingerprint: "fp", Token: "tok", Now: now, LeaseEnd: now.Add(time.Minute)})
				if err != nil || !res.Acquired {
					b.Fatal(res, err)
				}
				if err := s.Complete(ctx, scope, key, "tok", benchResp, now, now.Add(time.Hour)); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				if res, err := s.Claim(ctx, replay); err != nil || res.Acquired {
					b.Fatal(res, err)
				}
				t3 := time.Now()
				tBare += t1.Sub(t0)
				tFirst += t2.Sub(t1)
				tReplay += t3.Sub(t2)
			}
			b.ReportMetric(float64(tFirst)/float64(tBare), "first/bare")
			b.ReportMetric(float64(tReplay)/float64(tBare), "replay/bare")
			b.ReportMetric(float64(tBare.Microseconds())/float64(b.N), "µs-bare/op")
		})
	}
}
