package pgxstore

import (
	"context"
	_ "embed" // for schemaTemplate
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/idemkit/idem/stores/sqlbase"
	"github.com/jackc/pgx/v5"
)

// DefaultTable is the table a Store uses unless WithTable names another.
const DefaultTable = sqlbase.DefaultTable

//go:embed schema.sql
var schemaTemplate string

// maxTable is PostgreSQL's limit on identifiers (NAMEDATALEN - 1).
const maxTable = 63

// validTable checks a table name. Only names matching
// ^[A-Za-z_][A-Za-z0-9_]{0,62}$ are accepted; they are then quoted with
// pgx.Identifier wherever they appear in SQL, so a name is never pasted raw.
func validTable(table string) error {
	if err := sqlbase.CheckTable(table, maxTable); err != nil {
		return fmt.Errorf("%w: %w", ErrBadOption, err)
	}
	return nil
}

// hashName returns 8 hex digits identifying name, used to keep derived
// identifiers unique when the table name is too long to be a prefix.
func hashName(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%08x", h.Sum32())
}

// derivedName returns table+suffix when it fits in PostgreSQL's 63-byte
// identifier limit, and otherwise a truncated table name, a hash of the full
// name and the suffix, so two long table names never share an index or a
// notification channel.
func derivedName(table, suffix string) string {
	if len(table)+len(suffix) <= 63 {
		return table + suffix
	}
	h := "_" + hashName(table)
	return table[:63-len(suffix)-len(h)] + h + suffix
}

// v1IndexName is the expiry index of schema version 1, which version 2
// drops.
func v1IndexName(table string) string { return derivedName(table, "_expires_at_idx") }
func channelName(table string) string { return derivedName(table, "_idem") }

// Schema returns the SQL that creates the store's table for the given
// table name (DefaultTable when empty), with every identifier quoted, and
// upgrades a table of the store's previous schema version. It is what
// CreateSchema runs, for projects that manage their schema with Flyway,
// Atlas, goose or similar: every statement is idempotent. The template is
// schema.sql in this module, where {{table}} and {{index}} stand for the
// quoted table name and the previous version's index.
//
// Schema returns an error wrapping ErrBadOption when table does not match
// ^[A-Za-z_][A-Za-z0-9_]{0,62}$. Names are case-sensitive once quoted:
// Schema("Keys") creates "Keys", not keys.
func Schema(table string) (string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := validTable(table); err != nil {
		return "", err
	}
	r := strings.NewReplacer(
		"{{table}}", pgx.Identifier{table}.Sanitize(),
		"{{index}}", pgx.Identifier{v1IndexName(table)}.Sanitize(),
	)
	return r.Replace(schemaTemplate), nil
}

// upgradeMarker separates, in schema.sql, the statements that create the
// table from those that upgrade a table of version 1.
const upgradeMarker = "-- upgrade from version 1 --"

// CreateSchema creates the store's table if it does not exist, and
// upgrades a table of the previous schema version (it adds the waiters
// column and drops the expiry index, locking the table for an instant;
// see "Schema" in the package doc). It runs in one transaction under a
// transaction-scoped advisory lock derived from the table name, so running
// it at every start-up of every instance is safe: concurrent CREATE TABLE
// IF NOT EXISTS can otherwise fail with a unique violation on pg_type. An
// up-to-date table is only looked up, never locked. Applications that
// manage migrations themselves use Schema instead and never call it.
func (s *Store) CreateSchema(ctx context.Context) error {
	sql, err := Schema(s.table)
	if err != nil {
		return err
	}
	create, upgrade, _ := strings.Cut(sql, upgradeMarker)
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgxstore: create schema: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", schemaLockKey(s.table)); err != nil {
		return fmt.Errorf("pgxstore: create schema: lock: %w", err)
	}
	// Without arguments pgx sends the script with the simple protocol, which
	// runs several statements in one round trip.
	if _, err := tx.Exec(ctx, create); err != nil {
		return fmt.Errorf("pgxstore: create schema: %w", err)
	}
	var old bool
	if err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_attribute
			WHERE attrelid = $1::text::regclass AND attname = 'waiters' AND NOT attisdropped)
		OR EXISTS (SELECT 1 FROM pg_index JOIN pg_class ON pg_class.oid = indexrelid
			WHERE indrelid = $1::text::regclass AND relname = $2)`,
		pgx.Identifier{s.table}.Sanitize(), v1IndexName(s.table)).Scan(&old); err != nil {
		return fmt.Errorf("pgxstore: create schema: %w", err)
	}
	if old {
		if _, err := tx.Exec(ctx, upgrade); err != nil {
			return fmt.Errorf("pgxstore: create schema: upgrade from version 1: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgxstore: create schema: commit: %w", err)
	}
	return nil
}

// schemaLockKey is the advisory lock key CreateSchema takes for a table.
func schemaLockKey(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("github.com/idemkit/idem/stores/pgx schema "))
	h.Write([]byte(table))
	return int64(h.Sum64())
}
