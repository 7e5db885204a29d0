package idemgrpc

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// responseTypes finds the Go type of a method's response, for replays:
// the type WithResponseType set; else the output of the method's
// descriptor in protoregistry.GlobalFiles, where generated code registers
// its services; else the type the handler returned when the answer was
// stored, by its full name in protoregistry.GlobalTypes. Answers are
// cached by method.
type responseTypes struct {
	fixed map[string]protoreflect.MessageType
	cache sync.Map // full method → protoreflect.MessageType
}

// find returns the response type of fullMethod, whose stored answer
// names the message stored as stored.
func (r *responseTypes) find(fullMethod, stored string) (protoreflect.MessageType, error) {
	if t, ok := r.fixed[fullMethod]; ok {
		return t, nil
	}
	if t, ok := r.cache.Load(fullMethod); ok {
		return t.(protoreflect.MessageType), nil
	}
	t, err := methodOutput(fullMethod)
	if err != nil && stored != "" {
		var err2 error
		if t, err2 = protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(stored)); err2 == nil {
			err = nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("idemgrpc: replaying %s: no response type: %w (stored message %q is not registered either); give one with WithResponseType", fullMethod, err, stored)
	}
	r.cache.Store(fullMethod, t)
	return t, nil
}

// methodOutput looks the method's output type up in the registries.
func methodOutput(fullMethod string) (protoreflect.MessageType, error) {
	service, method, ok := splitMethod(fullMethod)
	if !ok {
		return nil, fmt.Errorf("%q is not a full method name", fullMethod)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", service, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a service", service)
	}
	md := sd.Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return nil, fmt.Errorf("service %s has no method %s", service, method)
	}
	t, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, fmt.Errorf("output %s of %s: %w", md.Output().FullName(), fullMethod, err)
	}
	return t, nil
}

// knownMethod checks a ForMethod pattern against the services registered
// in protoregistry.GlobalFiles: a method its service does not have is a
// typo that would leave the real method on the default policy. Patterns
// of services not registered there (hand-written service descriptors)
// cannot be checked and pass.
func knownMethod(pattern string) error {
	service, method, ok := splitMethod(pattern)
	if !ok || method == "*" {
		return nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(service))
	if err != nil {
		return nil
	}
	if sd, ok := d.(protoreflect.ServiceDescriptor); ok && sd.Methods().ByName(protoreflect.Name(method)) == nil {
		return badOption("ForMethod(%q): service %s has no method %s", pattern, service, method)
	}
	return nil
}
