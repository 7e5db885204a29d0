package sqlbase

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemkit/idem/core/store"
)

// RecordColumns are the columns of a record's row, in the order of Row's
// and MicroRow's fields: what a store's SELECT of a record returns, and
// what MicroRow.Scan reads.
const RecordColumns = "fingerprint, state, status, headers, body, body_omitted, created_at, lease_end, expires_at"

// Row is a record's row as a store read it, NULLs included, with its times
// already decoded: the columns fingerprint, state, status, headers, body,
// body_omitted, created_at, lease_end and expires_at that every SQL store
// here keeps. A store whose driver scans into other types (pgtype, say)
// copies them into a Row; one that keeps times as Unix microseconds scans
// a MicroRow.
type Row struct {
	Fingerprint []byte
	State       sql.NullInt64 // 1 in progress, 2 completed
	Status      sql.NullInt64 // NULL, except in a completed row written before results were opaque
	Header      []byte        // the result's Head (with a Status: the legacy header bytes)
	Body        []byte
	BodyOmitted bool
	CreatedAt   sql.NullTime
	LeaseEnd    sql.NullTime // NULL once completed
	ExpiresAt   sql.NullTime
}

// Record converts the row to a record, checking that it is one a store can
// have written; otherwise it returns an error wrapping
// store.ErrCorruptRecord (a NULL where a value must be, a state other
// than 1 or 2, a completed row without a head). A completed row with a
// status was written before results were opaque: its head is
// store.LegacyHead of the status and the headers column. The times are
// kept as they are (in their location); a NULL lease end is the zero
// time.
func (r *Row) Record() (store.Record, error) {
	if !r.State.Valid || !r.CreatedAt.Valid || !r.ExpiresAt.Valid {
		return store.Record{}, fmt.Errorf("%w: state, created_at or expires_at is NULL", store.ErrCorruptRecord)
	}
	if r.State.Int64 < 0 || r.State.Int64 > 255 {
		return store.Record{}, fmt.Errorf("%w: state %d", store.ErrCorruptRecord, r.State.Int64)
	}
	rec := store.Record{
		Fingerprint: string(r.Fingerprint),
		State:       store.State(r.State.Int64),
		CreatedAt:   r.CreatedAt.Time,
		ExpiresAt:   r.ExpiresAt.Time,
	}
	if r.LeaseEnd.Valid {
		rec.LeaseEnd = r.LeaseEnd.Time
	}
	if rec.State == store.Completed {
		rec.Result = store.Result{Head: r.Header, Body: r.Body, BodyOmitted: r.BodyOmitted}
		if r.Status.Valid {
			rec.Result.Head = store.LegacyHead(int(r.Status.Int64), r.Header)
		}
	}
	return rec, rec.Check()
}

// MicroRow is a record's row as a store that keeps its times as integers
// of Unix microseconds (MySQL, SQLite) scans it with database/sql.
type MicroRow struct {
	Fingerprint []byte
	State       sql.NullInt64
	Status      sql.NullInt64
	Header      []byte
	Body        []byte
	BodyOmitted sql.NullBool
	CreatedAt   sql.NullInt64
	LeaseEnd    sql.NullInt64
	ExpiresAt   sql.NullInt64
}

// Scan reads the row's RecordColumns from row. It
// reports false, and no error, when there is no row.
func (r *MicroRow) Scan(row *sql.Row) (bool, error) {
	err := row.Scan(&r.Fingerprint, &r.State, &r.Status, &r.Header, &r.Body, &r.BodyOmitted,
		&r.CreatedAt, &r.LeaseEnd, &r.ExpiresAt)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Record converts the row to a record as Row.Record does, its times in
// UTC (FromMicro).
func (r *MicroRow) Record() (store.Record, error) {
	row := Row{
		Fingerprint: r.Fingerprint,
		State:       r.State,
		Status:      r.Status,
		Header:      r.Header,
		Body:        r.Body,
		BodyOmitted: r.BodyOmitted.Bool,
		CreatedAt:   microTime(r.CreatedAt),
		LeaseEnd:    microTime(r.LeaseEnd),
		ExpiresAt:   microTime(r.ExpiresAt),
	}
	return row.Record()
}

func microTime(us sql.NullInt64) sql.NullTime {
	if !us.Valid {
		return sql.NullTime{}
	}
	return sql.NullTime{Time: FromMicro(us.Int64), Valid: true}
}
