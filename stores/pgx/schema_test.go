package pgxstore

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

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
			} else if !errors.Is(err, ErrInvalidTable) {
				t.Fatalf("New(%q) error = %v, want ErrInvalidTable", tc.name, err)
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
		`CREATE INDEX IF NOT EXISTS "idempotency_keys_expires_at_idx" ON "idempotency_keys" (expires_at);`,
		`PRIMARY KEY (scope, key)`,
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
	for _, f := range []func(string) string{indexName, channelName} {
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
		if err := p1.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = $1`, table).Scan(&idx); err != nil || idx != 2 {
			t.Fatalf("table %s has %d indexes, want 2 (primary key and expiry): %v", table, idx, err)
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
