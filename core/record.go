package idem

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"

	"github.com/idemkit/idem/core/store"
)

// This file is how a stored result (store.Result) holds what the engine
// answered: an HTTP response, or a value or final error of Do.

// ErrCorruptRecord is wrapped by the error of a record that no store can
// have written (store.ErrCorruptRecord): a bad state, a result the engine
// cannot decode. The engine answers such a request 503 and never replays
// the record.
var ErrCorruptRecord = store.ErrCorruptRecord

// The status codes a stored response can hold. A 1xx cannot be replayed
// and the engine never stores one; a code above 599 is not HTTP.
const (
	MinStatus = 200
	MaxStatus = 599
)

// The header wire format, in an HTTP result's head after the status (and,
// before results were opaque, in the stores' headers columns), for
// transports that keep metadata in a result of their own (idemgrpc):
//
//	version byte 1
//	uvarint  number of names
//	per name, in sorted order: uvarint length, the name's bytes,
//	          uvarint number of values, per value: uvarint length, bytes
//
// Names and values are kept byte for byte: empty values, bytes that are
// not UTF-8 and names without values included. Varints are in their
// shortest form. A nil and an empty header both encode as no names.
const headerFormat = 1

// AppendHeader appends h in the header wire format to b. Names are written
// sorted, so equal headers encode to equal bytes.
func AppendHeader(b []byte, h http.Header) []byte {
	return appendHeader(slices.Grow(b, headerSize(h)), h)
}

// appendHeader is AppendHeader into b, which has room for h (headerSize):
// it appends without growing b.
func appendHeader(b []byte, h http.Header) []byte {
	var scratch [16]string
	names := scratch[:0]
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	b = append(b, headerFormat)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		vals := h[name]
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(len(vals)))
		for _, v := range vals {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

// headerSize bounds the bytes AppendHeader appends for h.
func headerSize(h http.Header) int {
	size := 1 + binary.MaxVarintLen64
	for name, vals := range h {
		size += 2*binary.MaxVarintLen64 + len(name)
		for _, v := range vals {
			size += binary.MaxVarintLen64 + len(v)
		}
	}
	return size
}

// ParseHeader decodes the header wire format (see AppendHeader) from a
// []byte or a string. It returns an error wrapping ErrCorruptRecord for
// anything AppendHeader cannot have written, except that names are
// accepted in any order (stores written before the format was shared did
// not sort them); a name given twice is refused. A name without values
// decodes to an empty, non-nil slice.
func ParseHeader[B ~[]byte | ~string](b B) (http.Header, error) {
	p := string(b) // one copy; every name and value is a substring of it
	if len(p) == 0 || p[0] != headerFormat {
		return nil, errHeader("unknown format version")
	}
	p = p[1:]
	count, p, ok := store.ReadUvarint(p)
	if !ok || count > uint64(len(p)) {
		return nil, errHeader("bad name count")
	}
	h := make(http.Header, count)
	// The values of every name share one array, grown when a name has
	// more than one: a header is mostly one value per name.
	all := make([]string, 0, count)
	for range count {
		var name string
		if name, p, ok = store.ReadChunk(p); !ok {
			return nil, errHeader("bad name")
		}
		if _, dup := h[name]; dup {
			return nil, errHeader(fmt.Sprintf("name %q given twice", name))
		}
		var nv uint64
		if nv, p, ok = store.ReadUvarint(p); !ok || nv > uint64(len(p)) {
			return nil, errHeader("bad value count")
		}
		start := len(all)
		for range nv {
			var v string
			if v, p, ok = store.ReadChunk(p); !ok {
				return nil, errHeader("bad value")
			}
			all = append(all, v)
		}
		h[name] = all[start:len(all):len(all)]
	}
	if len(p) != 0 {
		return nil, errHeader("bytes after the last name")
	}
	return h, nil
}

func errHeader(why string) error {
	return fmt.Errorf("%w: malformed headers: %s", ErrCorruptRecord, why)
}
