package peers

import (
	"context"
	"errors"
	"fmt"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/antientropy"
	"google.golang.org/protobuf/proto"
)

// SyncServer answers anti-entropy calls: the serving side of Digest, Pull and Push, as
// the peer listener's handlers call it (*mesh.Mesh implements it).
type SyncServer interface {
	Digest(req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error)
	Pull(req *fanoutv1.PullRequest, send func(*fanoutv1.PullResponse) error) error
	Push(req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error)
}

// HandleSync makes addr answer anti-entropy calls with s (replacing any earlier one).
// An address without one (or after HandleSync(addr, nil)) refuses them as a permanent
// error, reachable or not: it serves no anti-entropy, so a round with it fails at once
// and a test that wants only Replicate on the network gets no rounds in its way.
func (n *FakeNetwork) HandleSync(addr string, s SyncServer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s == nil {
		delete(n.syncers, addr)
		return
	}
	n.syncers[addr] = s
}

// syncer is the SyncServer of c's address, or the error a call to it gets.
func (c *FakeConn) syncer(ctx context.Context) (SyncServer, error) {
	c.net.mu.Lock()
	s := c.net.syncers[c.addr]
	c.net.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("%w: fake %s serves no anti-entropy", ErrPermanent, c.addr)
	}
	if err := ctx.Err(); err != nil {
		return nil, Classify(err)
	}
	return s, nil
}

// Digest calls the address's SyncServer with a copy of req, as a real call would
// send it.
func (c *FakeConn) Digest(ctx context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	s, err := c.syncer(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := s.Digest(proto.Clone(req).(*fanoutv1.DigestRequest))
	if err != nil {
		return nil, c.served(err)
	}
	return proto.Clone(resp).(*fanoutv1.DigestResponse), nil
}

// Pull calls the address's SyncServer, handing recv a copy of each message it sends.
func (c *FakeConn) Pull(ctx context.Context, req *fanoutv1.PullRequest, recv func(*fanoutv1.PullResponse) error) error {
	s, err := c.syncer(ctx)
	if err != nil {
		return err
	}
	var recvErr error // recv's own, returned as it is (as Conn.Pull does)
	err = s.Pull(proto.Clone(req).(*fanoutv1.PullRequest), func(m *fanoutv1.PullResponse) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		recvErr = recv(proto.Clone(m).(*fanoutv1.PullResponse))
		return recvErr
	})
	switch {
	case recvErr != nil:
		return recvErr
	case err != nil:
		return c.served(err)
	}
	return nil
}

// Push calls the address's SyncServer with a copy of req.
func (c *FakeConn) Push(ctx context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	s, err := c.syncer(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := s.Push(proto.Clone(req).(*fanoutv1.PushRequest))
	if err != nil {
		return nil, c.served(err)
	}
	return proto.Clone(resp).(*fanoutv1.PushResponse), nil
}

// served classifies an error the SyncServer answered with, as the peer listener's
// status codes would have it: a busy server (antientropy.ErrBusy, RESOURCE_EXHAUSTED)
// is congestion, a cancelled or expired call is classified as Classify does, anything
// else is permanent. The server's error stays in the chain.
func (c *FakeConn) served(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Classify(err)
	case errors.Is(err, antientropy.ErrBusy):
		return fmt.Errorf("%w: fake %s: %w", ErrCongestion, c.addr, err)
	}
	return fmt.Errorf("%w: fake %s: %w", ErrPermanent, c.addr, err)
}
