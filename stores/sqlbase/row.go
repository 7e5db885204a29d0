package sqlbase

import (
	"database/sql"
	"errors"
	"fmt"

	idem "github.com/idemkit/idem/core"
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
	Status      sql.NullInt64 // NULL while in progress
	Header      []byte        // idem.AppendHeader's encoding; nil (NULL) for no header
	Body        []byte
	BodyOmitted bool
	CreatedAt   sql.NullTime
	LeaseEnd    sql.NullTime // NULL once completed
	ExpiresAt   sql.NullTime
}

// Record converts the row to a record, checking that it is one a store can
// have written; otherwise it returns an error wrapping
// idem.ErrCorruptRecord (a NULL where a value must be, a state other than
// 1 or 2, a status outside 200 to 599, a malformed headers column). The
// times are kept as they are (in their location); a NULL lease end is the
// zero time.
func (r *Row) Record() (idem.Record, error) {
	if !r.State.Valid || !r.CreatedAt.Valid || !r.ExpiresAt.Valid {
		return idem.Record{}, fmt.Errorf("%w: state, created_at or expires_at is NULL", idem.ErrCorruptRecord)
	}
	if r.State.Int64 < 0 || r.State.Int64 > 255 {
		return idem.Record{}, fmt.Errorf("%w: state %d", idem.ErrCorruptRecord, r.State.Int64)
	}
	rec := idem.Record{
		Fingerprint: string(r.Fingerprint),
		State:       idem.State(r.State.Int64),
		CreatedAt:   r.CreatedAt.Time,
		ExpiresAt:   r.ExpiresAt.Time,
	}
	if r.LeaseEnd.Valid {
		rec.LeaseEnd = r.LeaseEnd.Time
	}
	if rec.State == idem.StateCompleted {
		if !r.Status.Valid {
			return idem.Record{}, fmt.Errorf("%w: completed with a NULL status", idem.ErrCorruptRecord)
		}
		rec.Response = &idem.Response{Status: int(r.Status.Int64), Body: r.Body, BodyOmitted: r.BodyOmitted}
		if r.Header != nil {
			h, err := idem.ParseHeader(r.Header)
			if err != nil {
				return idem.Record{}, err
			}
			rec.Response.Header = h
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
func (r *MicroRow) Record() (idem.Record, error) {
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
