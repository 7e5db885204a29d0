package idemgrpc

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"google.golang.org/grpc/metadata"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, e := range []envelope{
		{kind: kindMessage, typeName: "grpc.testing.SimpleResponse", payload: []byte{0x12, 0x01, 'x'},
			header:  metadata.MD{"x-a": {"1", ""}, "x-bin": {"\x00\xff"}},
			trailer: metadata.MD{"x-t": {"t"}}},
		{kind: kindStatus, payload: []byte{0x08, 0x09}, header: metadata.MD{}, trailer: metadata.MD{}},
		{kind: kindMessage, header: metadata.MD{}, trailer: metadata.MD{}}, // an empty message
	} {
		got, err := unmarshalEnvelope(e.marshal())
		if err != nil {
			t.Fatal(err)
		}
		if got.kind != e.kind || got.typeName != e.typeName || !bytes.Equal(got.payload, e.payload) ||
			!reflect.DeepEqual(got.header, e.header) || !reflect.DeepEqual(got.trailer, e.trailer) {
			t.Errorf("round trip of %+v gave %+v", e, got)
		}
	}
}

func TestEnvelopeCorrupt(t *testing.T) {
	good := (&envelope{kind: kindMessage, typeName: "a.B", payload: []byte("p"), header: metadata.MD{"k": {"v"}}}).marshal()
	for name, b := range map[string][]byte{
		"empty":           nil,
		"another version": append([]byte{2}, good[1:]...),
		"unknown kind":    append([]byte{1, 9}, good[2:]...),
		"truncated":       good[:len(good)-1],
		"trailing bytes":  append(bytes.Clone(good), 0),
		"a huge chunk":    {1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"bad header":      {1, 1, 0, 0, 1, 7, 1, 0},
	} {
		if _, err := unmarshalEnvelope(b); !errors.Is(err, errEnvelope) {
			t.Errorf("%s: %v, want errEnvelope", name, err)
		}
	}
}

func FuzzEnvelope(f *testing.F) {
	f.Add((&envelope{kind: kindMessage, typeName: "a.B", payload: []byte("p"), header: metadata.MD{"k": {"v"}}}).marshal())
	f.Add((&envelope{kind: kindStatus, payload: []byte{8, 5}}).marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := unmarshalEnvelope(b)
		if err != nil {
			return
		}
		again, err := unmarshalEnvelope(e.marshal())
		if err != nil || again.kind != e.kind || again.typeName != e.typeName || !bytes.Equal(again.payload, e.payload) ||
			!reflect.DeepEqual(again.header, e.header) || !reflect.DeepEqual(again.trailer, e.trailer) {
			t.Errorf("decoded %+v re-encodes to %+v (%v)", e, again, err)
		}
	})
}
