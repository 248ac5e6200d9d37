package peers

import (
	"context"
	"fmt"
	"sync"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"google.golang.org/protobuf/proto"
)

// FakeNetwork is an in-memory stand-in for the peer network, for tests of the
// dispatcher: each address is served by a handler function instead of a socket.
// Errors a handler returns are passed through Classify, exactly like a real Conn.
type FakeNetwork struct {
	mu       sync.Mutex
	handlers map[string]FakeHandler // guarded by mu
	syncers  map[string]SyncServer  // guarded by mu (fakesync.go)
}

// FakeHandler answers a Replicate call to one fake address.
type FakeHandler func(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error)

// NewFakeNetwork returns an empty network: every address is unreachable.
func NewFakeNetwork() *FakeNetwork {
	return &FakeNetwork{handlers: make(map[string]FakeHandler), syncers: make(map[string]SyncServer)}
}

// Handle makes addr answer with h (replacing any earlier handler). A nil h makes addr
// unreachable again.
func (n *FakeNetwork) Handle(addr string, h FakeHandler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if h == nil {
		delete(n.handlers, addr)
		return
	}
	n.handlers[addr] = h
}

// FakeConn is a connection to one address of a FakeNetwork.
type FakeConn struct {
	net  *FakeNetwork
	addr string
}

// Dial returns a connection to addr; like grpc.NewClient it succeeds even when nothing
// listens there yet.
func (n *FakeNetwork) Dial(addr string) *FakeConn { return &FakeConn{net: n, addr: addr} }

// Replicate calls the handler registered for the address.
func (c *FakeConn) Replicate(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	c.net.mu.Lock()
	h := c.net.handlers[c.addr]
	c.net.mu.Unlock()
	if h == nil {
		return nil, fmt.Errorf("%w: fake %s: connection refused", ErrNetwork, c.addr)
	}
	if err := ctx.Err(); err != nil {
		return nil, Classify(err)
	}
	resp, err := h(ctx, req)
	if err != nil {
		return nil, Classify(err)
	}
	if got, want := len(resp.GetStatuses()), len(req.GetEvents()); got != want {
		return nil, fmt.Errorf("%w: fake %s answered %d statuses for %d events", ErrPermanent, c.addr, got, want)
	}
	return resp, nil
}

// ReplicateFrame decodes the frame and calls the handler, as Replicate does. It holds
// no answer (held is false).
func (c *FakeConn) ReplicateFrame(ctx context.Context, f *frame.Frame, events int, _ bool) (*fanoutv1.ReplicateResponse, bool, error) {
	req := new(fanoutv1.ReplicateRequest)
	if err := proto.Unmarshal(f.B, req); err != nil {
		return nil, false, fmt.Errorf("%w: fake %s: %v", ErrPermanent, c.addr, err)
	}
	if len(req.GetEvents()) != events {
		return nil, false, fmt.Errorf("%w: fake %s: frame of %d events, said %d", ErrPermanent, c.addr, len(req.GetEvents()), events)
	}
	resp, err := c.Replicate(ctx, req)
	return resp, false, err
}

// Addr is the fake peer's address.
func (c *FakeConn) Addr() string { return c.addr }

// Close does nothing.
func (c *FakeConn) Close() error { return nil }
