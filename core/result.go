package idem

import (
	"encoding/binary"
	"fmt"

	"github.com/idemkit/idem/core/store"
)

// This file turns what the engine answered into a store.Result and back:
// the store keeps the bytes and never reads them.

// resultKind is what a Response holds: an HTTP response, or what Do keeps.
type resultKind uint8

const (
	kindHTTP  resultKind = iota // Status, Header and Body of an HTTP response (and gRPC's envelope)
	kindValue                   // Do: the operation's value, in Body
	kindFinal                   // Do: a FinalError's message, in Body
)

// The first byte of a result's head, which names its format. headHTTP is
// followed by the status as a uvarint and the header wire format
// (AppendHeader); it is also what store.LegacyHead builds for records
// written before results were opaque. headValue and headFinal are
// followed by nothing, or, when the result is sealed (WithEncryption), by
// the header wire format holding HeaderSealed.
const (
	headHTTP  = 1
	headValue = 2
	headFinal = 3
)

// The heads of Do's results, shared: stores copy what they keep.
var (
	valueHead = []byte{headValue}
	finalHead = []byte{headFinal}
)

// encodeResult is the store.Result that keeps resp. The result shares
// resp.Body. An HTTP head that would be longer than store.MaxHead keeps
// the status alone, and the body is then omitted too: a replay without
// its headers must not pass for the whole answer.
func encodeResult(resp *Response) store.Result {
	res := store.Result{Body: resp.Body, BodyOmitted: resp.BodyOmitted}
	switch resp.kind {
	case kindValue, kindFinal:
		res.Head = valueHead
		if resp.kind == kindFinal {
			res.Head = finalHead
		}
		if len(resp.Header) > 0 { // sealed (WithEncryption): the key's ID
			res.Head = AppendHeader(append([]byte(nil), res.Head...), resp.Header)
		}
	default:
		head := make([]byte, 0, 1+binary.MaxVarintLen64+headerSize(resp.Header))
		head = binary.AppendUvarint(append(head, headHTTP), uint64(resp.Status))
		n := len(head)
		head = appendHeader(head, resp.Header) // in place: no second allocation
		if len(head) > store.MaxHead {
			head = append(head[:n], headerFormat, 0)
			res.Body, res.BodyOmitted = nil, true
		}
		res.Head = head
	}
	if res.BodyOmitted {
		res.Body = nil
	}
	return res
}

// decodeInto sets resp to the Response res keeps, or returns an error
// wrapping ErrCorruptRecord when its head is not one encodeResult (or
// store.LegacyHead) writes. The response shares res.Body.
func decodeInto(resp *Response, res store.Result) error {
	*resp = Response{Body: res.Body, BodyOmitted: res.BodyOmitted}
	if res.BodyOmitted {
		resp.Body = nil
	}
	if len(res.Head) == 0 {
		return fmt.Errorf("%w: a completed record without a result", ErrCorruptRecord)
	}
	switch res.Head[0] {
	case headValue, headFinal:
		resp.kind = kindValue
		if res.Head[0] == headFinal {
			resp.kind = kindFinal
		}
		if len(res.Head) > 1 {
			h, err := ParseHeader(res.Head[1:])
			if err != nil {
				return err
			}
			resp.Header = h
		}
		return nil
	case headHTTP:
	default:
		return fmt.Errorf("%w: unknown result format %d", ErrCorruptRecord, res.Head[0])
	}
	status, rest, ok := store.ReadUvarint(string(res.Head[1:]))
	if !ok || status < MinStatus || status > MaxStatus {
		return fmt.Errorf("%w: the result's status is not %d to %d", ErrCorruptRecord, MinStatus, MaxStatus)
	}
	h, err := ParseHeader(rest)
	if err != nil {
		return err
	}
	resp.Status, resp.Header = int(status), h
	if res.BodyOmitted {
		// A store that dropped the body (its own size bound) kept the head
		// as the engine encoded it: the headers that describe the body's
		// bytes go with the body, as in WithoutBody.
		for k := range h {
			if describesBody(k) {
				delete(h, k)
			}
		}
	}
	return nil
}

// decoded is a record and its response in one allocation.
type decoded struct {
	rec  record
	resp Response
}

// fromStore is rec with its result decoded, or an error wrapping
// ErrCorruptRecord.
func fromStore(rec *store.Record) (*record, error) {
	if err := rec.Check(); err != nil {
		return nil, err
	}
	d := &decoded{rec: record{Fingerprint: rec.Fingerprint, State: rec.State, CreatedAt: rec.CreatedAt, LeaseEnd: rec.LeaseEnd, ExpiresAt: rec.ExpiresAt}}
	if rec.State == store.Completed {
		if err := decodeInto(&d.resp, rec.Result); err != nil {
			return nil, err
		}
		d.rec.Response = &d.resp
	}
	return &d.rec, nil
}

// failedResult reports that resp says the operation took no effect (an
// HTTP 4xx or 5xx, a final error), for store.Completion.Failed.
func failedResult(resp *Response) bool {
	return resp.kind == kindFinal || resp.kind == kindHTTP && resp.Status >= 400
}
