package store

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Takeable reports whether a claim at now takes the record over: it has
// expired (now is at or past ExpiresAt), or it is in progress and its
// lease has ended (now is at or past LeaseEnd). A store's Claim takes the
// key exactly when there is no record or the record is takeable.
func (r *Record) Takeable(now time.Time) bool {
	if !now.Before(r.ExpiresAt) {
		return true
	}
	return r.State == InProgress && !now.Before(r.LeaseEnd)
}

// Check reports, with an error wrapping ErrCorruptRecord, a record that no
// store can have written: a state other than InProgress and Completed, no
// ExpiresAt, an in-progress record without a LeaseEnd, or a completed one
// without a Head. Stores call it on what they read back; the engine
// checks the Head's contents itself.
func (r *Record) Check() error {
	switch {
	case r.State != InProgress && r.State != Completed:
		return fmt.Errorf("%w: state %d is neither in progress (1) nor completed (2)", ErrCorruptRecord, r.State)
	case r.ExpiresAt.IsZero():
		return fmt.Errorf("%w: no expiry time", ErrCorruptRecord)
	case r.State == InProgress && r.LeaseEnd.IsZero():
		return fmt.Errorf("%w: in progress without a lease end", ErrCorruptRecord)
	case r.State == Completed && len(r.Result.Head) == 0:
		return fmt.Errorf("%w: completed without a result", ErrCorruptRecord)
	}
	return nil
}

// headHTTP is the first byte of an HTTP head: the engine's format for a
// status and headers, the one LegacyHead builds.
const headHTTP = 1

// LegacyHead returns the Head of a record a store wrote before results
// were opaque, from the status and the header bytes it kept (nil or empty
// for none). The engine reads it as an HTTP response with that status and
// those headers, and reports a record whose status or header bytes are
// malformed as corrupt.
//
//	res := store.Result{Head: store.LegacyHead(int(status), headerCol), Body: body}
func LegacyHead(status int, header []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+max(len(header), 2))
	b = append(b, headHTTP)
	b = binary.AppendUvarint(b, uint64(max(status, 0)))
	if len(header) == 0 {
		return append(b, 1, 0) // header format 1, no names
	}
	return append(b, header...)
}
