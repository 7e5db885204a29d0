package idemgrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"

	idem "github.com/idemkit/idem/core"
	"google.golang.org/grpc/metadata"
)

// The envelope is the value the server interceptor stores through
// Engine.Do for one answered call:
//
//	version  byte 1
//	kind     byte: 1 a response message, 2 an error status
//	chunk    the response message's full name ("" for a status)
//	chunk    the message's wire bytes, or the google.rpc.Status's
//	chunk    the header metadata, in idem's header wire format
//	chunk    the trailer metadata, likewise
//
// where a chunk is a uvarint length and that many bytes.
const envelopeVersion = 1

type kind byte

const (
	kindMessage kind = 1
	kindStatus  kind = 2
)

// envelope is a stored answer, decoded.
type envelope struct {
	kind            kind
	typeName        string
	payload         []byte
	header, trailer metadata.MD
}

var errEnvelope = errors.New("idemgrpc: the stored answer is not one this package wrote")

func (e *envelope) marshal() []byte {
	hdr := idem.AppendHeader(nil, http.Header(e.header))
	trl := idem.AppendHeader(nil, http.Header(e.trailer))
	b := make([]byte, 0, 2+4*binary.MaxVarintLen64+len(e.typeName)+len(e.payload)+len(hdr)+len(trl))
	b = append(b, envelopeVersion, byte(e.kind))
	b = appendChunk(b, []byte(e.typeName))
	b = appendChunk(b, e.payload)
	b = appendChunk(b, hdr)
	return appendChunk(b, trl)
}

func appendChunk(b, c []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(c)))
	return append(b, c...)
}

func unmarshalEnvelope(b []byte) (*envelope, error) {
	if len(b) < 2 || b[0] != envelopeVersion {
		return nil, fmt.Errorf("%w: unknown version", errEnvelope)
	}
	e := &envelope{kind: kind(b[1])}
	if e.kind != kindMessage && e.kind != kindStatus {
		return nil, fmt.Errorf("%w: unknown kind %d", errEnvelope, b[1])
	}
	b = b[2:]
	var chunks [4][]byte
	for i := range chunks {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return nil, fmt.Errorf("%w: chunk %d is truncated", errEnvelope, i+1)
		}
		chunks[i], b = b[w:w+int(n)], b[w+int(n):]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last chunk", errEnvelope, len(b))
	}
	e.typeName, e.payload = string(chunks[0]), chunks[1]
	for i, md := range []*metadata.MD{&e.header, &e.trailer} {
		h, err := idem.ParseHeader(chunks[2+i])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errEnvelope, err)
		}
		*md = metadata.MD(h)
	}
	return e, nil
}
