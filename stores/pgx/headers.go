package pgxstore

import (
	"encoding/binary"
	"errors"
	"net/http"
)

// Headers are stored in a bytea column in a small length-prefixed format
// rather than jsonb: jsonb cannot hold NUL or bytes that are not UTF-8,
// which header values may carry (obs-text), and a store must give back
// exactly what it was given.
//
//	version byte (1)
//	uvarint  number of names
//	per name: uvarint len, name bytes, uvarint number of values,
//	          per value: uvarint len, value bytes
//
// A nil header is stored as NULL and read back as nil.

const headerFormatV1 = 1

var errHeaderFormat = errors.New("pgxstore: malformed headers column")

func encodeHeader(h http.Header) []byte {
	if h == nil {
		return nil
	}
	n := 1 + binary.MaxVarintLen64
	for k, vs := range h {
		n += 2*binary.MaxVarintLen64 + len(k)
		for _, v := range vs {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, headerFormatV1)
	b = binary.AppendUvarint(b, uint64(len(h)))
	for k, vs := range h {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

func decodeHeader(b []byte) (http.Header, error) {
	if b == nil {
		return nil, nil
	}
	if len(b) == 0 || b[0] != headerFormatV1 {
		return nil, errHeaderFormat
	}
	d := decoder{b: b[1:]}
	names := d.uvarint()
	if d.err != nil || names > uint64(len(d.b)) {
		return nil, errHeaderFormat
	}
	h := make(http.Header, names)
	for range names {
		k := d.str()
		nv := d.uvarint()
		if d.err != nil || nv > uint64(len(d.b)) {
			return nil, errHeaderFormat
		}
		var vs []string
		if nv > 0 {
			vs = make([]string, nv)
		} else {
			vs = []string{}
		}
		for i := range vs {
			vs[i] = d.str()
		}
		if d.err != nil {
			return nil, errHeaderFormat
		}
		h[k] = vs
	}
	if len(d.b) != 0 {
		return nil, errHeaderFormat
	}
	return h, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errHeaderFormat
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errHeaderFormat
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
