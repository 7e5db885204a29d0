package mysqlstore

import (
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTableNameValidation(t *testing.T) {
	long := strings.Repeat("a", 64)
	db := offlineDB(t)
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
		{"a`b", false},
		{"a;DROP TABLE x", false},
		{"é", false},
		{"a\x00", false},
		{"tab\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The name is checked before New asks the (here unreachable)
			// server anything: a good one fails only for the server.
			_, err := New(db, WithTable(tc.name), WithSweepInterval(0))
			if tc.ok {
				if errors.Is(err, ErrBadOption) {
					t.Fatalf("New(%q) = %v", tc.name, err)
				}
			} else if !errors.Is(err, ErrBadOption) {
				t.Fatalf("New(%q) error = %v, want ErrBadOption", tc.name, err)
			}
			if tc.name == "" {
				return // Schema("") means the default table
			}
			if _, err := Schema(tc.name); tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrBadOption)) {
				t.Fatalf("Schema(%q) error = %v", tc.name, err)
			}
		})
	}
}

func TestSchemaText(t *testing.T) {
	sql, err := Schema("")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS `idempotency_keys` (",
		"PRIMARY KEY (scope, `key`)",
		"KEY expires_at_idx (expires_at)",
		"ENGINE = InnoDB;",
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("schema lacks %q:\n%s", want, sql)
		}
	}
	if strings.Contains(sql, "{{") {
		t.Errorf("placeholder left in schema:\n%s", sql)
	}
}

// CreateSchema is idempotent and safe to run from several processes at
// once: here two pools run it at the same time for a new table, then
// once more.
func TestCreateSchemaConcurrent(t *testing.T) {
	p1, p2 := newDB(t, 2), newDB(t, 2)
	ctx := t.Context()
	for round := range 6 {
		table := randomTable()
		if round == 0 {
			table = (table + "_LongerName_" + strings.Repeat("z", 64))[:64]
		}
		t.Cleanup(func() { dropTable(t, table) })
		var wg sync.WaitGroup
		for _, db := range []*sql.DB{p1, p2, p1, p2} {
			s, err := New(db, WithTable(table), WithSweepInterval(0))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				defer s.Close()
				if err := s.CreateSchema(ctx); err != nil {
					t.Errorf("round %d: %v", round, err)
				}
			})
		}
		wg.Wait()
		s, _ := New(p1, WithTable(table), WithSweepInterval(0))
		defer s.Close()
		if err := s.CreateSchema(ctx); err != nil {
			t.Fatalf("again: %v", err)
		}
		if res, err := s.Claim(ctx, claimAt("k", "f", "t", t0, time.Minute)); err != nil || !res.Acquired {
			t.Fatalf("claim on the new table: %+v %v", res, err)
		}
		var idx int
		if err := p1.QueryRowContext(ctx, `SELECT COUNT(DISTINCT index_name) FROM information_schema.statistics
			WHERE table_schema = DATABASE() AND table_name = ?`, table).Scan(&idx); err != nil || idx != 2 {
			t.Fatalf("table %s has %d indexes, want 2 (primary key and expiry): %v", table, idx, err)
		}
	}
}

// A table created by the schema before tx_mark existed gets the column
// from CreateSchema, concurrently run, and then works in exactly-once
// mode.
func TestCreateSchemaAddsTxMark(t *testing.T) {
	db := newDB(t, 4)
	ctx := t.Context()
	table := randomTable()
	t.Cleanup(func() { dropTable(t, table) })
	old, err := Schema(table)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(old, "    tx_mark ")
	j := i + strings.Index(old[i:], "\n") + 1
	if i < 0 {
		t.Fatal("the schema has no tx_mark column")
	}
	if _, err := db.ExecContext(ctx, old[:i]+old[j:]); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 3 {
		s, err := New(db, WithTable(table), WithSweepInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wg.Go(func() {
			if err := s.CreateSchema(ctx); err != nil {
				t.Errorf("CreateSchema on a table without tx_mark: %v", err)
			}
		})
	}
	wg.Wait()
	s, err := New(db, WithTable(table), WithSweepInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := claimAt("k", "fp", "t", t0, time.Minute)
	if res, err := s.Claim(ctx, c); err != nil || !res.Acquired {
		t.Fatal(res, err)
	}
	tx, err := s.ExactlyOnce().BeginTx(ctx, c.Hold())
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, completeAt(okResult, t0, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
}
