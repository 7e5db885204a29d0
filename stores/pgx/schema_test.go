package pgxstore

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestTableNameValidation(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"idempotency_keys", true},
		{"_t", true},
		{"T1", true},
		{"a", true},
		{long, true},
		{long + "a", false},
		{"", false},
		{"1abc", false},
		{"a-b", false},
		{"a b", false},
		{"a.b", false},
		{`a"b`, false},
		{"a;DROP TABLE x", false},
		{"é", false},
		{"a\x00", false},
		{"tab\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(dummyDB{}, WithTable(tc.name))
			if tc.ok {
				if err != nil {
					t.Fatalf("New(%q) = %v", tc.name, err)
				}
				s.Close()
			} else if !errors.Is(err, ErrBadOption) {
				t.Fatalf("New(%q) error = %v, want ErrBadOption", tc.name, err)
			}
			if tc.name == "" {
				return // Schema("") means the default table
			}
			if _, err := Schema(tc.name); tc.ok != (err == nil) {
				t.Fatalf("Schema(%q) error = %v", tc.name, err)
			}
		})
	}
}

// dummyDB satisfies DB for tests that never reach the database.
type dummyDB struct{ DB }

func TestSchemaText(t *testing.T) {
	sql, err := Schema("")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`CREATE TABLE IF NOT EXISTS "idempotency_keys" (`,
		`PRIMARY KEY (scope, key)`,
		`) WITH (fillfactor = 90);`,
		`ALTER TABLE "idempotency_keys" ADD COLUMN IF NOT EXISTS waiters boolean NOT NULL DEFAULT false;`,
		`DROP INDEX IF EXISTS "idempotency_keys_expires_at_idx";`,
		upgradeMarker,
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("schema lacks %q:\n%s", want, sql)
		}
	}
	if strings.Contains(sql, "{{") {
		t.Errorf("placeholder left in schema:\n%s", sql)
	}
	// Derived names stay within 63 bytes and distinct for long tables.
	a, b := strings.Repeat("x", 62)+"a", strings.Repeat("x", 62)+"b"
	for _, f := range []func(string) string{v1IndexName, channelName} {
		if f(a) == f(b) || len(f(a)) > 63 || len(f(b)) > 63 {
			t.Errorf("derived names %q %q", f(a), f(b))
		}
	}
}

// CreateSchema is idempotent and safe to run from several processes at
// once: here two pools (two sets of sessions) run it at the same time for
// a new table, many times over, then once more.
func TestCreateSchemaConcurrent(t *testing.T) {
	p1 := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
	p2 := newPool(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
	ctx := t.Context()
	for round := range 8 {
		table := randomTable()
		t.Cleanup(func() { dropTable(t, table) })
		if round == 0 {
			table += "_LongerName_" + strings.Repeat("z", 40)
			table = table[:63]
		}
		var wg sync.WaitGroup
		for _, p := range []*pgxpool.Pool{p1, p2, p1, p2} {
			s, err := New(p, WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				if err := s.CreateSchema(ctx); err != nil {
					t.Errorf("round %d: %v", round, err)
				}
			})
		}
		wg.Wait()
		s, _ := New(p1, WithTable(table))
		if err := s.CreateSchema(ctx); err != nil {
			t.Fatalf("again: %v", err)
		}
		if res, err := s.Claim(ctx, claimAt("k", "f", "t", t0, time.Minute)); err != nil || !res.Acquired {
			t.Fatalf("claim on the new table: %+v %v", res, err)
		}
		var idx int
		if err := p1.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = $1`, table).Scan(&idx); err != nil || idx != 1 {
			t.Fatalf("table %s has %d indexes, want 1 (the primary key): %v", table, idx, err)
		}
	}
}

// Quoting keeps case and never lets a name escape: a table called
// "Keys" is a different table from keys.
func TestTableNameIsQuoted(t *testing.T) {
	p := newPool(t)
	ctx := t.Context()
	upper, lower := randomTable()+"_Keys", ""
	lower = strings.ToLower(upper)
	t.Cleanup(func() { dropTable(t, upper); dropTable(t, lower) })
	for _, name := range []string{upper, lower} {
		s, err := New(p, WithTable(name))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSchema(ctx); err != nil {
			t.Fatal(err)
		}
		if res, err := s.Claim(ctx, claimAt("k", "f", "t", t0, time.Minute)); err != nil || !res.Acquired {
			t.Fatalf("%s: %+v %v", name, res, err)
		}
	}
}

// schemaV1 is the table of schema version 1, as Schema returned it before
// the waiters column, the fillfactor and the HOT completions.
const schemaV1 = `CREATE TABLE {{table}} (
    scope        bytea       NOT NULL,
    key          text        COLLATE "C" NOT NULL,
    fingerprint  bytea       NOT NULL,
    token        bytea       NOT NULL,
    state        smallint    NOT NULL,
    status       integer,
    headers      bytea,
    body         bytea,
    body_omitted boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL,
    lease_end    timestamptz,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX {{index}} ON {{table}} (expires_at);`

// A table of version 1 with records in it is upgraded by CreateSchema,
// concurrently from several stores: its records are still replayed and
// claimed, the expiry index is gone, the waiters column and the fillfactor
// are there, and completions are HOT updates. Once upgraded, CreateSchema
// only looks: it does not wait for a transaction that holds the table.
func TestCreateSchemaUpgradesVersion1(t *testing.T) {
	p := newPool(t)
	ctx := t.Context()
	table := randomTable()
	t.Cleanup(func() { dropTable(t, table) })
	v1 := strings.NewReplacer("{{table}}", quoted(table), "{{index}}", quoted(v1IndexName(table))).Replace(schemaV1)
	if _, err := p.Exec(ctx, v1); err != nil {
		t.Fatal(err)
	}
	s, err := New(p, WithTable(table), WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Records written by version 1: one completed, one in flight.
	scope := claimAt("", "", "", t0, 0).Scope
	if _, err := p.Exec(ctx, `INSERT INTO `+quoted(table)+` (scope, key, fingerprint, token, state, status, headers, body, created_at, lease_end, expires_at)
		VALUES ($1, 'done', 'fp', 't', 2, 201, NULL, 'ok', $2, NULL, $3), ($1, 'busy', 'fp', 't', 1, NULL, NULL, NULL, $2, $3, $3)`,
		[]byte(scope), t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			s, _ := New(p, WithTable(table), WithSweepInterval(0))
			if err := s.CreateSchema(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var idx int
	var opts []string
	if err := p.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_indexes WHERE tablename = $1), coalesce(reloptions, '{}')
		FROM pg_class WHERE oid = $2::text::regclass`, table, quoted(table)).Scan(&idx, &opts); err != nil {
		t.Fatal(err)
	}
	if idx != 1 || !slices.Contains(opts, "fillfactor=90") {
		t.Fatalf("after the upgrade: %d indexes (want only the primary key), options %v", idx, opts)
	}

	res, err := s.Claim(ctx, claimAt("done", "fp", "u", t0.Add(time.Minute), time.Minute))
	if err != nil || res.Acquired || res.Existing.State != store.Completed || string(res.Existing.Result.Body) != "ok" ||
		!reflect.DeepEqual(res.Existing.Result.Head, store.LegacyHead(201, nil)) {
		t.Fatalf("replay of a version 1 record: %+v %v", res, err)
	}
	listening(t, s)
	ch, stop, err := s.Watch(ctx, ref(scope, "busy"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := s.Complete(ctx, hold(scope, "busy", "t"), completion(result(200), t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if !fired(ch, 5*time.Second) {
		t.Fatal("the waiter of a version 1 record was not woken")
	}
	upd, hot := tableUpdates(t, p, table)
	if upd == 0 || hot != upd {
		t.Errorf("%d of %d updates were HOT", hot, upd)
	}

	// Up to date: CreateSchema takes no table lock, so a transaction
	// holding one does not hold it up.
	tx, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE `+quoted(table)+` IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := s.CreateSchema(cctx); err != nil {
		t.Fatalf("CreateSchema on an up-to-date table: %v", err)
	}
}

func TestOptions(t *testing.T) {
	s, err := New(dummyDB{}, nil, WithNotify(false), nil)
	if err != nil {
		t.Fatalf("New with nil options: %v", err)
	}
	s.Close()
	if _, err := New(dummyDB{}, WithSweepInterval(-time.Second)); !errors.Is(err, ErrBadOption) {
		t.Errorf("a negative sweep interval: %v, want ErrBadOption", err)
	}
}
