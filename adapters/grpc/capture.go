package idemgrpc

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// capture is the grpc.ServerTransportStream a protected handler sees: it
// keeps the header and trailer metadata the handler sets, so they can be
// stored with the answer, and hands them to the real stream only once the
// answer is settled. SendHeader sends nothing early: for a unary call the
// header goes out with the response.
type capture struct {
	method string

	mu              sync.Mutex
	header, trailer metadata.MD
	headerSent      bool // SendHeader was called: later SetHeader calls fail, as on a real stream
	done            bool // the handler returned: every call fails
}

var _ grpc.ServerTransportStream = (*capture)(nil)

func (c *capture) Method() string { return c.method }

func (c *capture) SetHeader(md metadata.MD) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.headerSent {
		return status.Error(codes.Internal, "idemgrpc: SetHeader after the header was sent or the handler returned")
	}
	c.header = join(c.header, md)
	return nil
}

func (c *capture) SendHeader(md metadata.MD) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.headerSent {
		return status.Error(codes.Internal, "idemgrpc: SendHeader called twice or after the handler returned")
	}
	c.header = join(c.header, md)
	c.headerSent = true
	return nil
}

func (c *capture) SetTrailer(md metadata.MD) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return status.Error(codes.Internal, "idemgrpc: SetTrailer after the handler returned")
	}
	c.trailer = join(c.trailer, md)
	return nil
}

// close ends the capture and returns what was set; the handler's
// goroutines can set nothing more.
func (c *capture) close() (header, trailer metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	return c.header, c.trailer
}

// join merges md into dst (allocated on first use), copying the values.
func join(dst, md metadata.MD) metadata.MD {
	if md.Len() == 0 {
		return dst
	}
	if dst == nil {
		dst = make(metadata.MD, md.Len())
	}
	for k, vs := range md {
		dst.Append(k, vs...)
	}
	return dst
}
