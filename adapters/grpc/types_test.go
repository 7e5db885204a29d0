package idemgrpc_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	idemgrpc "github.com/idemkit/idem/adapters/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// A service registered by hand, with no descriptor in
// protoregistry.GlobalFiles: its Call method answers with fn.
const handCall = "/idemgrpc.test.Hand/Call"

type handService struct {
	runs atomic.Int64
	fn   func() proto.Message
}

var handDesc = grpc.ServiceDesc{
	ServiceName: "idemgrpc.test.Hand",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Call",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(testpb.SimpleRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			s := srv.(*handService)
			h := func(context.Context, any) (any, error) { s.runs.Add(1); return s.fn(), nil }
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: handCall}, h)
		},
	}},
}

// dynamicReply is the descriptor of a message registered nowhere:
// idemgrpc.test.Reply { string text = 1; }.
func dynamicReply(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:    proto.String("idemgrpc_test_reply.proto"),
		Package: proto.String("idemgrpc.test"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Reply"),
			Field: []*descriptorpb.FieldDescriptorProto{{
				Name: proto.String("text"), JsonName: proto.String("text"), Number: proto.Int32(1),
				Type:  descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			}},
		}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("Reply")
}

// callHand calls handCall twice with one key and returns both answers,
// decoded as reply makes them.
func callHand(t *testing.T, opts []idemgrpc.Option, fn func() proto.Message, reply func() proto.Message) (svc *handService, first, second proto.Message, err error) {
	t.Helper()
	svc = &handService{fn: fn}
	addr := serve(t, newEngine(t, newMemoryStore(t)), &service{}, opts, func(s *grpc.Server) { s.RegisterService(&handDesc, svc) })
	cc := dial(t, addr)
	ctx := withKey(t.Context(), "hand-1")
	first = reply()
	if err := cc.Invoke(ctx, handCall, request("x"), first); err != nil {
		t.Fatal(err)
	}
	var hdr metadata.MD
	second = reply()
	err = cc.Invoke(ctx, handCall, request("x"), second, grpc.Header(&hdr))
	if err == nil && !replayed(hdr) {
		t.Errorf("second answer not replayed: %v", hdr)
	}
	return svc, first, second, err
}

func TestResponseTypes(t *testing.T) {
	md := dynamicReply(t)
	newReply := func() proto.Message {
		m := dynamicpb.NewMessage(md)
		m.Set(md.Fields().ByName("text"), protoreflect.ValueOfString("hello"))
		return m
	}
	emptyReply := func() proto.Message { return dynamicpb.NewMessage(md) }

	t.Run("a service in GlobalFiles", func(t *testing.T) {
		// TestReplay covers it: grpc.testing.TestService is generated code.
		c := testpb.NewTestServiceClient(dial(t, serve(t, newEngine(t, newMemoryStore(t)), &service{}, nil)))
		ctx := withKey(t.Context(), "k")
		first, _, _, _ := call(ctx, c, request("x"))
		again, hdr, _, err := call(ctx, c, request("x"))
		if err != nil || !replayed(hdr) || !proto.Equal(first, again) {
			t.Errorf("%v %v replayed=%v", again, err, replayed(hdr))
		}
	})
	t.Run("a hand-registered service answering a generated type", func(t *testing.T) {
		svc, first, second, err := callHand(t, nil,
			func() proto.Message { return &testpb.SimpleResponse{Username: "by name"} },
			func() proto.Message { return new(testpb.SimpleResponse) })
		if err != nil || !proto.Equal(first, second) || svc.runs.Load() != 1 {
			t.Errorf("replay %v %v after %d runs, want %v after 1", second, err, svc.runs.Load(), first)
		}
	})
	t.Run("a type registered nowhere is a clear error", func(t *testing.T) {
		svc, _, _, err := callHand(t, nil, newReply, emptyReply)
		if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "WithResponseType") {
			t.Errorf("replay: %v, want Internal naming WithResponseType", err)
		}
		if n := svc.runs.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1: the answer is stored", n)
		}
	})
	t.Run("WithResponseType", func(t *testing.T) {
		opts := []idemgrpc.Option{idemgrpc.WithResponseType(handCall, dynamicpb.NewMessage(md))}
		svc, first, second, err := callHand(t, opts, newReply, emptyReply)
		if err != nil || !proto.Equal(first, second) || svc.runs.Load() != 1 {
			t.Errorf("replay %v %v after %d runs, want %v after 1", second, err, svc.runs.Load(), first)
		}
	})
}

func TestFieldKey(t *testing.T) {
	req := &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Message: "rid-1"}, ResponseSize: 3}
	for _, tc := range []struct {
		path string
		req  any
		want string
	}{
		{"response_status.message", req, "rid-1"},
		{"response_status.code", req, ""},                        // not a string
		{"response_size", req, ""},                               // not a string
		{"response_status", req, ""},                             // a message
		{"response_status.message.x", req, ""},                   // past a string
		{"nope", req, ""},                                        // no such field
		{"responseStatus.message", req, ""},                      // the JSON name is not the proto name
		{"response_status.message", &testpb.SimpleRequest{}, ""}, // unset
		{"payload.body", req, ""},                                // bytes
		{"username", &testpb.SimpleResponse{Username: "u"}, "u"},
		{"x", "not a message", ""},
	} {
		if got := idemgrpc.FieldKey(tc.path)(t.Context(), unaryCall, tc.req); got != tc.want {
			t.Errorf("FieldKey(%q)(%v) = %q, want %q", tc.path, tc.req, got, tc.want)
		}
	}
}
