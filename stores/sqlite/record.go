package sqlitestore

import (
	"database/sql"
	"errors"
	"fmt"
	"time"

	idem "github.com/idemkit/idem/core"
)

// The table keeps microseconds. The engine's now is rounded down and the
// deadlines it sets are rounded up, so "now >= deadline" in SQL holds
// exactly when it holds in Go for deadlines on a microsecond, and is at
// most a microsecond late (the safe direction: a lease lasts a little
// longer) otherwise. Every method rounds the same way, so they agree.
func floorMicro(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

func ceilMicro(t time.Time) time.Time {
	f := t.Truncate(time.Microsecond)
	if f.Equal(t) {
		return f
	}
	return f.Add(time.Microsecond)
}

func fromMicro(us int64) time.Time { return time.UnixMicro(us).UTC() }

// rawRecord is a row as scanned, nullable columns included.
type rawRecord struct {
	fingerprint []byte
	state       sql.NullInt64
	status      sql.NullInt64
	headers     []byte
	body        []byte
	bodyOmitted sql.NullBool
	createdAt   sql.NullInt64
	leaseEnd    sql.NullInt64
	expiresAt   sql.NullInt64
}

// scan reads recordCols from row; false when there is no row.
func (r *rawRecord) scan(row *sql.Row) (bool, error) {
	err := row.Scan(&r.fingerprint, &r.state, &r.status, &r.headers, &r.body, &r.bodyOmitted,
		&r.createdAt, &r.leaseEnd, &r.expiresAt)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// record converts a row to a record, checking that it is one this package
// can have written; otherwise it returns an error wrapping
// idem.ErrCorruptRecord (a NULL where a value must be, a state other than
// 1 or 2, a status outside 200 to 599, a malformed headers column).
func (r *rawRecord) record() (idem.Record, error) {
	if !r.state.Valid || !r.createdAt.Valid || !r.expiresAt.Valid {
		return idem.Record{}, fmt.Errorf("%w: state, created_at or expires_at is NULL", idem.ErrCorruptRecord)
	}
	if r.state.Int64 < 0 || r.state.Int64 > 255 {
		return idem.Record{}, fmt.Errorf("%w: state %d", idem.ErrCorruptRecord, r.state.Int64)
	}
	rec := idem.Record{
		Fingerprint: string(r.fingerprint),
		State:       idem.State(r.state.Int64),
		CreatedAt:   fromMicro(r.createdAt.Int64),
		ExpiresAt:   fromMicro(r.expiresAt.Int64),
	}
	if r.leaseEnd.Valid {
		rec.LeaseEnd = fromMicro(r.leaseEnd.Int64)
	}
	if rec.State == idem.StateCompleted {
		if !r.status.Valid {
			return idem.Record{}, fmt.Errorf("%w: completed with a NULL status", idem.ErrCorruptRecord)
		}
		rec.Response = &idem.Response{Status: int(r.status.Int64), Body: r.body, BodyOmitted: r.bodyOmitted.Bool}
		if r.headers != nil {
			h, err := idem.ParseHeader(r.headers)
			if err != nil {
				return idem.Record{}, err
			}
			rec.Response.Header = h
		}
	}
	return rec, rec.Check()
}
