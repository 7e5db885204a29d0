package pgxstore

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Every statement works in each of pgx's query exec modes, including the
// simple protocol that PgBouncer in transaction mode needs.
func TestQueryExecModes(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement,
		pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec,
		pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 2; c.ConnConfig.DefaultQueryExecMode = mode })
			s := newStore(t, p)
			ctx := t.Context()
			c := idem.Claim{Scope: "4:acme4:POST7:/o/{id}", Key: "k", Fingerprint: "\x00f\xff", Token: "t\x00", Now: t0, LeaseEnd: t0.Add(time.Minute)}
			if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			if err := s.Extend(ctx, c.Scope, c.Key, c.Token, t0, t0.Add(2*time.Minute)); err != nil {
				t.Fatal(err)
			}
			resp := idem.Response{Status: 201, Header: http.Header{"A": {"1", "\xff"}}, Body: []byte{0, 1, 2, '\\', 'x'}}
			if err := s.Complete(ctx, c.Scope, c.Key, c.Token, resp, t0, t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			res, err := s.Claim(ctx, c)
			if err != nil || res.Acquired || !reflect.DeepEqual(*res.Existing.Response, resp) || res.Existing.Fingerprint != c.Fingerprint {
				t.Fatalf("replay = %+v %v", res.Existing, err)
			}
			if err := s.Release(ctx, c.Scope, c.Key, c.Token); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatal(err)
			}
			if n, err := s.DeleteExpired(ctx, t0.Add(time.Hour)); err != nil || n != 1 {
				t.Fatal(n, err)
			}
			if ok, err := s.Delete(ctx, c.Scope, c.Key); err != nil || ok {
				t.Fatal(ok, err)
			}
			eo := s.ExactlyOnce()
			if res, err := eo.Claim(ctx, c); err != nil || !res.Acquired {
				t.Fatal(res, err)
			}
			tx, err := eo.BeginTx(ctx, c.Scope, c.Key, c.Token)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx, resp, t0, t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		})
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
