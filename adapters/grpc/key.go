package idemgrpc

import (
	"context"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// FieldKey returns a KeyFunc that reads the key from a string field of the
// request message, by its proto name, as AIP-155 puts it in request_id;
// a dotted path reaches into singular message fields. A message without
// such a field, or with it empty, gives "" (the metadata is then used).
//
//	idemgrpc.WithKeyFunc(idemgrpc.FieldKey("request_id"))
//	idemgrpc.WithKeyFunc(idemgrpc.FieldKey("order.request_id"))
func FieldKey(path string) KeyFunc {
	names := strings.Split(path, ".")
	return func(_ context.Context, _ string, req any) string {
		pm, ok := req.(proto.Message)
		if !ok {
			return ""
		}
		m := pm.ProtoReflect()
		for i, name := range names {
			fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
			if fd == nil || fd.Cardinality() == protoreflect.Repeated {
				return ""
			}
			if i == len(names)-1 {
				if fd.Kind() != protoreflect.StringKind {
					return ""
				}
				return m.Get(fd).String()
			}
			if fd.Kind() != protoreflect.MessageKind || !m.Has(fd) {
				return ""
			}
			m = m.Get(fd).Message()
		}
		return ""
	}
}
