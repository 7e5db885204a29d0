package sqlbase

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// DefaultTable is the table name every SQL store here uses unless told
// otherwise.
const DefaultTable = "idempotency_keys"

// Options are the settings every SQL store here takes: its table, how
// often its background sweeper runs, and where it logs what it cannot
// return. A store keeps them in its own config, fills in its defaults,
// applies the user's options and calls Check.
type Options struct {
	Table         string
	SweepInterval time.Duration // 0 runs no sweeper
	Logger        *slog.Logger  // nil discards
}

// Check validates o for a store whose table names may be up to maxTable
// bytes long (see CheckTable), and replaces a nil Logger by one that
// discards. A bad option makes it return an error wrapping badOption, the
// store's ErrBadOption.
func (o *Options) Check(badOption error, maxTable int) error {
	if err := CheckTable(o.Table, maxTable); err != nil {
		return fmt.Errorf("%w: %w", badOption, err)
	}
	if o.SweepInterval < 0 {
		return fmt.Errorf("%w: negative sweep interval %v", badOption, o.SweepInterval)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// ErrTableName is wrapped by CheckTable's error.
var ErrTableName = errors.New("sqlbase: bad table name")

// CheckTable reports whether name is a table name a store may splice into
// its SQL, quoted: one that matches ^[A-Za-z_][A-Za-z0-9_]{0,maxLen-1}$
// (maxLen is the database's limit on identifiers: 63 for PostgreSQL, 64
// for MySQL). Otherwise it returns an error wrapping ErrTableName that
// quotes the pattern.
func CheckTable(name string, maxLen int) error {
	ok := len(name) > 0 && len(name) <= maxLen
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9'
	}
	if !ok {
		return &tableError{name, maxLen}
	}
	return nil
}

type tableError struct {
	name   string
	maxLen int
}

func (e *tableError) Error() string {
	return fmt.Sprintf("table name %q does not match ^[A-Za-z_][A-Za-z0-9_]{0,%d}$", e.name, e.maxLen-1)
}

func (e *tableError) Unwrap() error { return ErrTableName }
