package sqlbase

import (
	"bytes"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/core/store"
)

// FuzzRecord: whatever a row holds, decoding it never panics, and returns
// either a record that passes store's Check or an error wrapping
// store.ErrCorruptRecord.
func FuzzRecord(f *testing.F) {
	f.Add(int64(2), true, int64(201), legacyHeader, []byte("{}"), int64(1), true, int64(2), int64(3), false)
	f.Add(int64(2), false, int64(0), []byte{9, 'h'}, []byte("{}"), int64(1), false, int64(0), int64(3), true)
	f.Add(int64(1), true, int64(0), []byte(nil), []byte(nil), int64(1), true, int64(2), int64(2), true)
	f.Add(int64(2), false, int64(0), []byte{0xff, 0x01}, []byte(nil), int64(0), false, int64(0), int64(0), true)
	f.Add(int64(7), true, int64(700), []byte("x"), []byte("y"), int64(-1), true, int64(-5), int64(9), true)
	f.Fuzz(func(t *testing.T, state int64, statusOK bool, status int64, headers, body []byte,
		created int64, leaseOK bool, lease, expires int64, stateOK bool) {
		r := MicroRow{
			Fingerprint: []byte("fp"),
			State:       sql.NullInt64{Int64: state, Valid: stateOK},
			Status:      sql.NullInt64{Int64: status, Valid: statusOK},
			Header:      headers,
			Body:        body,
			CreatedAt:   sql.NullInt64{Int64: created, Valid: true},
			LeaseEnd:    sql.NullInt64{Int64: lease, Valid: leaseOK},
			ExpiresAt:   sql.NullInt64{Int64: expires, Valid: true},
		}
		rec, err := r.Record()
		if err != nil {
			if !errors.Is(err, store.ErrCorruptRecord) {
				t.Fatalf("error %v does not wrap ErrCorruptRecord", err)
			}
			return
		}
		if err := rec.Check(); err != nil {
			t.Fatalf("decoded record fails Check: %v", err)
		}
	})
}

// TestMicroRounding: deadlines round up and now rounds down, so a
// deadline off the microsecond is never judged passed early.
func TestMicroRounding(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		in          time.Duration
		floor, ceil time.Duration
	}{
		{0, 0, 0},
		{time.Microsecond, time.Microsecond, time.Microsecond},
		{1500 * time.Nanosecond, time.Microsecond, 2 * time.Microsecond},
		{999 * time.Nanosecond, 0, time.Microsecond},
	} {
		in := base.Add(tc.in)
		if got := FloorMicro(in); !got.Equal(base.Add(tc.floor)) {
			t.Errorf("FloorMicro(+%v) = +%v, want +%v", tc.in, got.Sub(base), tc.floor)
		}
		if got := CeilMicro(in); !got.Equal(base.Add(tc.ceil)) {
			t.Errorf("CeilMicro(+%v) = +%v, want +%v", tc.in, got.Sub(base), tc.ceil)
		}
	}
}

// legacyHeader is a header blob as stores kept it before results were
// opaque (core's header format 1): one header, Content-Type: text/plain.
var legacyHeader = []byte{1, 1, 12, 'C', 'o', 'n', 't', 'e', 'n', 't', '-', 'T', 'y', 'p', 'e', 1, 10, 't', 'e', 'x', 't', '/', 'p', 'l', 'a', 'i', 'n'}

// TestRowRecord: Row.Record decodes what a store writes (a head and a
// body kept as they are, the status NULL) and what it wrote before
// results were opaque (a status and header bytes, turned into
// store.LegacyHead), and refuses, with store.ErrCorruptRecord, what no
// store can have written.
func TestRowRecord(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(d time.Duration) sql.NullTime { return sql.NullTime{Time: created.Add(d), Valid: true} }
	n := func(v int64) sql.NullInt64 { return sql.NullInt64{Int64: v, Valid: true} }
	head := []byte{0xff, 0, 'h', 'e', 'a', 'd'} // opaque: the store never reads it
	inProgress := Row{Fingerprint: []byte("fp"), State: n(1), CreatedAt: at(0), LeaseEnd: at(time.Minute), ExpiresAt: at(time.Minute)}
	completed := Row{Fingerprint: []byte("fp"), State: n(2), Header: head, Body: []byte("ok"),
		CreatedAt: at(0), ExpiresAt: at(time.Hour)}
	legacy := with(completed, func(r *Row) { r.Status, r.Header = n(201), legacyHeader })
	result := func(want store.Result) func(t *testing.T, rec store.Record) {
		return func(t *testing.T, rec store.Record) {
			t.Helper()
			if rec.State != store.Completed || !rec.LeaseEnd.IsZero() || rec.Fingerprint != "fp" ||
				!bytes.Equal(rec.Result.Head, want.Head) || !bytes.Equal(rec.Result.Body, want.Body) ||
				rec.Result.BodyOmitted != want.BodyOmitted {
				t.Errorf("record %+v, want result %+v", rec, want)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		row     Row
		corrupt bool
		check   func(t *testing.T, rec store.Record)
	}{
		{"in progress", inProgress, false, func(t *testing.T, rec store.Record) {
			if rec.State != store.InProgress || !rec.LeaseEnd.Equal(created.Add(time.Minute)) ||
				rec.Result.Head != nil || rec.Result.Body != nil || rec.Fingerprint != "fp" {
				t.Errorf("record %+v", rec)
			}
		}},
		{"completed", completed, false, result(store.Result{Head: head, Body: []byte("ok")})},
		{"completed without body", with(completed, func(r *Row) { r.Body, r.BodyOmitted = nil, true }), false,
			result(store.Result{Head: head, BodyOmitted: true})},
		{"legacy completed", legacy, false,
			result(store.Result{Head: store.LegacyHead(201, legacyHeader), Body: []byte("ok")})},
		{"legacy completed without headers", with(legacy, func(r *Row) { r.Header = nil }), false,
			result(store.Result{Head: store.LegacyHead(201, nil), Body: []byte("ok")})},
		{"legacy completed without body", with(legacy, func(r *Row) { r.Body, r.BodyOmitted = nil, true }), false,
			result(store.Result{Head: store.LegacyHead(201, legacyHeader), BodyOmitted: true})},
		// The store keeps a legacy row's status and header bytes as they
		// are: the engine, which reads the head, refuses a bad one.
		{"legacy status 700", with(legacy, func(r *Row) { r.Status = n(700) }), false,
			result(store.Result{Head: store.LegacyHead(700, legacyHeader), Body: []byte("ok")})},
		{"legacy malformed headers", with(legacy, func(r *Row) { r.Header = []byte{0xff, 0x01} }), false,
			result(store.Result{Head: store.LegacyHead(201, []byte{0xff, 0x01}), Body: []byte("ok")})},
		{"NULL state", with(inProgress, func(r *Row) { r.State.Valid = false }), true, nil},
		{"NULL created_at", with(inProgress, func(r *Row) { r.CreatedAt.Valid = false }), true, nil},
		{"NULL expires_at", with(completed, func(r *Row) { r.ExpiresAt.Valid = false }), true, nil},
		{"NULL lease_end in progress", with(inProgress, func(r *Row) { r.LeaseEnd.Valid = false }), true, nil},
		{"state 0", with(inProgress, func(r *Row) { r.State = n(0) }), true, nil},
		{"state 3", with(inProgress, func(r *Row) { r.State = n(3) }), true, nil},
		{"state 257", with(inProgress, func(r *Row) { r.State = n(257) }), true, nil},
		{"state -1", with(inProgress, func(r *Row) { r.State = n(-1) }), true, nil},
		{"completed with a NULL head", with(completed, func(r *Row) { r.Header = nil }), true, nil},
		{"completed with an empty head", with(completed, func(r *Row) { r.Header = []byte{} }), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := tc.row.Record()
			if tc.corrupt {
				if !errors.Is(err, store.ErrCorruptRecord) {
					t.Fatalf("error %v, want one wrapping store.ErrCorruptRecord", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, rec)
		})
	}
}

func with(r Row, f func(*Row)) Row { f(&r); return r }

// TestMicroRowRecord: a MicroRow's times come back in UTC, and a NULL
// lease end is the zero time.
func TestMicroRowRecord(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	for _, tc := range []struct {
		name  string
		state int64
		lease sql.NullInt64
		want  time.Time
	}{
		{"in progress", 1, sql.NullInt64{Int64: created.Add(time.Minute).UnixMicro(), Valid: true}, created.Add(time.Minute)},
		{"completed, NULL lease", 2, sql.NullInt64{}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := MicroRow{State: sql.NullInt64{Int64: tc.state, Valid: true}, Status: sql.NullInt64{Int64: 200, Valid: true},
				CreatedAt: sql.NullInt64{Int64: created.UnixMicro(), Valid: true}, LeaseEnd: tc.lease,
				ExpiresAt: sql.NullInt64{Int64: created.Add(time.Minute).UnixMicro(), Valid: true}}
			rec, err := r.Record()
			if err != nil {
				t.Fatal(err)
			}
			if !rec.CreatedAt.Equal(created) || rec.CreatedAt.Location() != time.UTC || !rec.LeaseEnd.Equal(tc.want) {
				t.Errorf("created %v, lease end %v; want %v, %v", rec.CreatedAt, rec.LeaseEnd, created, tc.want)
			}
		})
	}
}
