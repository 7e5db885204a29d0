package sqlbase_test

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"time"

	idem "github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/store"
	"github.com/idemkit/idem/stores/sqlbase"
)

// A store scans a record's row and decodes it. Here the row is built by
// hand; a store scans it from its table (MicroRow.Scan for one that keeps
// times as Unix microseconds).
func ExampleMicroRow_Record() {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	row := sqlbase.MicroRow{
		Fingerprint: []byte("fp"),
		State:       sql.NullInt64{Int64: int64(store.Completed), Valid: true},
		Header:      []byte("head"), // the result's Head, opaque to the store
		Body:        []byte(`{"id":1}`),
		CreatedAt:   sql.NullInt64{Int64: created.UnixMicro(), Valid: true},
		ExpiresAt:   sql.NullInt64{Int64: created.Add(24 * time.Hour).UnixMicro(), Valid: true},
	}
	rec, err := row.Record()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rec.State, string(rec.Result.Head), string(rec.Result.Body), rec.ExpiresAt)

	// A row written before results were opaque: a status and header bytes
	// (here none), which become a legacy head.
	row.Status = sql.NullInt64{Int64: 201, Valid: true}
	row.Header = nil
	rec, err = row.Record()
	fmt.Println(err, bytes.Equal(rec.Result.Head, store.LegacyHead(201, nil)), string(rec.Result.Body))

	row.Status.Valid = false // a completed row without a head
	_, err = row.Record()
	fmt.Println(errors.Is(err, store.ErrCorruptRecord))
	// Output:
	// completed head {"id":1} 2026-01-03 03:04:05 +0000 UTC
	// <nil> true {"id":1}
	// true
}

// A store checks its options in New, with its own ErrBadOption and its
// database's limit on identifiers.
func ExampleOptions_Check() {
	errBadOption := fmt.Errorf("examplestore: %w", idem.ErrBadOption)
	for _, o := range []sqlbase.Options{
		{Table: sqlbase.DefaultTable, SweepInterval: time.Minute},
		{Table: "idem-keys"},
		{Table: "keys", SweepInterval: -time.Second},
	} {
		err := o.Check(errBadOption, 63)
		fmt.Println(err, errors.Is(err, idem.ErrBadOption))
	}
	// Output:
	// <nil> false
	// examplestore: idem: bad option: table name "idem-keys" does not match ^[A-Za-z_][A-Za-z0-9_]{0,62}$ true
	// examplestore: idem: bad option: negative sweep interval -1s true
}

// Deadlines round up and now rounds down, to the microsecond a table
// keeps.
func ExampleCeilMicro() {
	t := time.Date(2026, 1, 2, 3, 4, 5, 1500, time.UTC)
	fmt.Println(sqlbase.FloorMicro(t).Nanosecond(), sqlbase.CeilMicro(t).Nanosecond())
	// Output: 1000 2000
}
