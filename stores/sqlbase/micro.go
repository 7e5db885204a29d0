package sqlbase

import "time"

// The SQL stores keep times in microseconds. The engine's now is rounded
// down (FloorMicro) and the deadlines it sets are rounded up (CeilMicro),
// so "now >= deadline" in SQL holds exactly when it holds in Go for
// deadlines on a microsecond, and is at most a microsecond late (the safe
// direction: a lease lasts a little longer) otherwise. Every method of a
// store must round the same way, so that they agree.

// FloorMicro returns t rounded down to a microsecond: how a store passes
// the engine's now to SQL.
func FloorMicro(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// CeilMicro returns t rounded up to a microsecond: how a store passes a
// deadline (lease end, expiry) to SQL.
func CeilMicro(t time.Time) time.Time {
	f := t.Truncate(time.Microsecond)
	if f.Equal(t) {
		return f
	}
	return f.Add(time.Microsecond)
}

// FromMicro returns the time us microseconds after the Unix epoch, in UTC:
// how a store reads back a time it kept as an integer.
func FromMicro(us int64) time.Time { return time.UnixMicro(us).UTC() }
