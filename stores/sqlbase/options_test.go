package sqlbase

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
)

func TestCheckTable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		table  string
		maxLen int
		ok     bool
	}{
		{"default", DefaultTable, 63, true},
		{"underscore first", "_keys", 63, true},
		{"digits after the first", "k2024", 63, true},
		{"one letter", "k", 63, true},
		{"63 of 63", strings.Repeat("k", 63), 63, true},
		{"64 of 63", strings.Repeat("k", 64), 63, false},
		{"64 of 64", strings.Repeat("k", 64), 64, true},
		{"empty", "", 63, false},
		{"digit first", "1keys", 63, false},
		{"dash", "idem-keys", 63, false},
		{"dot", "app.keys", 63, false},
		{"quote", `idem"keys`, 63, false},
		{"backquote", "idem`keys", 63, false},
		{"space", "idem keys", 63, false},
		{"non-ASCII letter", "clés", 63, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckTable(tc.table, tc.maxLen)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrTableName) {
				t.Fatalf("error %v, want one wrapping ErrTableName", err)
			}
			want := fmt.Sprintf("table name %q does not match ^[A-Za-z_][A-Za-z0-9_]{0,%d}$", tc.table, tc.maxLen-1)
			if err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
		})
	}
}

func TestOptionsCheck(t *testing.T) {
	bad := fmt.Errorf("teststore: %w", idem.ErrBadOption)
	for _, tc := range []struct {
		name string
		opts Options
		want string // "" for no error
	}{
		{"defaults", Options{Table: DefaultTable, SweepInterval: time.Minute}, ""},
		{"no sweeper", Options{Table: DefaultTable}, ""},
		{"bad table", Options{Table: "a-b"}, "does not match"},
		{"negative sweep interval", Options{Table: DefaultTable, SweepInterval: -time.Second}, "negative sweep interval -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			err := o.Check(bad, 63)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if o.Logger == nil {
					t.Error("a nil Logger is not replaced")
				}
				return
			}
			if !errors.Is(err, bad) || !errors.Is(err, idem.ErrBadOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one wrapping the store's ErrBadOption saying %q", err, tc.want)
			}
		})
	}
}
