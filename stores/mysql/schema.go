package mysqlstore

import (
	"context"
	_ "embed" // for schemaTemplate
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/idemkit/idem/stores/sqlbase"
)

// DefaultTable is the table a Store uses unless WithTable names another.
const DefaultTable = sqlbase.DefaultTable

//go:embed schema.sql
var schemaTemplate string

// maxTable is the longest table name MySQL takes.
const maxTable = 64

// validTable checks a table name: only names matching
// ^[A-Za-z_][A-Za-z0-9_]{0,63}$ are accepted, and they are backquoted
// wherever they appear in SQL.
func validTable(table string) error {
	if err := sqlbase.CheckTable(table, maxTable); err != nil {
		return fmt.Errorf("%w: %w", ErrBadOption, err)
	}
	return nil
}

// Schema returns the SQL that creates the store's table, with its primary
// key and expiry index, for the given table name (DefaultTable when
// empty). It is what CreateSchema runs, for projects that manage their
// schema with a migration tool: one idempotent CREATE TABLE IF NOT EXISTS.
// The template is schema.sql in this module.
//
// Schema returns an error wrapping ErrBadOption when table does not
// match ^[A-Za-z_][A-Za-z0-9_]{0,63}$.
func Schema(table string) (string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := validTable(table); err != nil {
		return "", err
	}
	return strings.ReplaceAll(schemaTemplate, "{{table}}", quoteIdent(table)), nil
}

// CreateSchema creates the store's table if it does not exist, adds the
// tx_mark column to a table created before the column existed, and checks
// that the connection runs in autocommit mode, which every statement of
// the store relies on. It is one CREATE TABLE IF NOT EXISTS, which the
// server serializes on the table's metadata lock, and one look at
// information_schema (an ALTER TABLE the first time after an upgrade), so
// it is safe to run at every start-up of every instance, concurrently.
func (s *Store) CreateSchema(ctx context.Context) error {
	var autocommit int
	if err := s.db.QueryRowContext(ctx, "SELECT @@autocommit").Scan(&autocommit); err != nil {
		return fmt.Errorf("mysqlstore: create schema: %w", err)
	}
	if autocommit != 1 {
		return errAutocommit
	}
	sql, err := Schema(s.table)
	if err != nil {
		return err
	}
	if _, err := s.db.ExecContext(ctx, sql); err != nil {
		return fmt.Errorf("mysqlstore: create schema: %w", err)
	}
	if err := s.addTxMark(ctx); err != nil {
		return fmt.Errorf("mysqlstore: create schema: adding column tx_mark: %w", err)
	}
	return nil
}

// addTxMark adds the tx_mark column to a table that lacks it (one made by
// an earlier version's schema). A concurrent CreateSchema may add it
// first: the duplicate column error (1060) then means it is there.
func (s *Store) addTxMark(ctx context.Context) error {
	var n int
	q := "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = " +
		string(appendLit(nil, s.table)) + " AND COLUMN_NAME = 'tx_mark'"
	if err := s.db.QueryRowContext(ctx, q).Scan(&n); err != nil {
		return err
	}
	if n > 0 {
		return nil
	}
	_, err := s.db.ExecContext(ctx, "ALTER TABLE "+quoteIdent(s.table)+" ADD COLUMN tx_mark VARBINARY(16) NULL")
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1060 {
		return nil
	}
	return err
}

var errAutocommit = errors.New("mysqlstore: the connection runs with autocommit off; every statement of the store must commit on its own (remove autocommit=0 from the DSN or the server's init_connect)")
