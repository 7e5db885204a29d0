package sqlitestore

import (
	"database/sql"
	"errors"
	"net/http"
	"testing"
	"time"

	idem "github.com/idemkit/idem/core"
)

// FuzzRecord: whatever a row holds, decoding it never panics, and returns
// either a record that passes idem's Check or an error wrapping
// idem.ErrCorruptRecord.
func FuzzRecord(f *testing.F) {
	good := idem.AppendHeader(nil, http.Header{"Content-Type": {"application/json"}})
	f.Add(int64(2), true, int64(201), good, []byte("{}"), int64(1), true, int64(2), int64(3), false)
	f.Add(int64(1), true, int64(0), []byte(nil), []byte(nil), int64(1), true, int64(2), int64(2), true)
	f.Add(int64(2), false, int64(0), []byte{0xff, 0x01}, []byte(nil), int64(0), false, int64(0), int64(0), true)
	f.Add(int64(7), true, int64(700), []byte("x"), []byte("y"), int64(-1), true, int64(-5), int64(9), true)
	f.Fuzz(func(t *testing.T, state int64, statusOK bool, status int64, headers, body []byte,
		created int64, leaseOK bool, lease, expires int64, stateOK bool) {
		r := rawRecord{
			fingerprint: []byte("fp"),
			state:       sql.NullInt64{Int64: state, Valid: stateOK},
			status:      sql.NullInt64{Int64: status, Valid: statusOK},
			headers:     headers,
			body:        body,
			createdAt:   sql.NullInt64{Int64: created, Valid: true},
			leaseEnd:    sql.NullInt64{Int64: lease, Valid: leaseOK},
			expiresAt:   sql.NullInt64{Int64: expires, Valid: true},
		}
		rec, err := r.record()
		if err != nil {
			if !errors.Is(err, idem.ErrCorruptRecord) {
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
		if got := floorMicro(in); !got.Equal(base.Add(tc.floor)) {
			t.Errorf("floorMicro(+%v) = +%v, want +%v", tc.in, got.Sub(base), tc.floor)
		}
		if got := ceilMicro(in); !got.Equal(base.Add(tc.ceil)) {
			t.Errorf("ceilMicro(+%v) = +%v, want +%v", tc.in, got.Sub(base), tc.ceil)
		}
	}
}
