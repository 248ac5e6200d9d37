package fanout

import (
	"bytes"
	"context"
	"io"
	"sync"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/proto"
)

// appClient calls a node as the app listener does, in process: a request goes in as
// its bytes (SubmitBytes, ServeSubmitStream) and the answers come out as bytes,
// decoded here as a client's stub would. Its errors are the node's own: pkg/grpcapi
// maps them to status codes, and its tests check the codes.
type appClient struct{ n *Node }

func (a appClient) Submit(ctx context.Context, req *fanoutv1.SubmitRequest) (*fanoutv1.SubmitResponse, error) {
	b, err := proto.Marshal(req)
	if err != nil {
		return nil, err
	}
	out, err := a.n.SubmitBytes(ctx, b)
	if err != nil {
		return nil, err
	}
	resp := new(fanoutv1.SubmitResponse)
	return resp, proto.Unmarshal(out, resp)
}

func (a appClient) Get(_ context.Context, req *fanoutv1.GetRequest) (*fanoutv1.GetResponse, error) {
	return a.n.Get(req)
}

func (a appClient) GetStatus(context.Context, *fanoutv1.GetStatusRequest) (*fanoutv1.GetStatusResponse, error) {
	return a.n.Status(), nil
}

// streamBuffer is how many messages a stream holds in each direction before its
// sender waits, as a gRPC stream's flow-control windows hold some.
const streamBuffer = 1024

// clientStream is the client's end of one in-process stream: the node's goroutine
// sends into msgs and ends with err, closing done.
type clientStream struct {
	msgs chan []byte
	done chan struct{}
	err  error // set before done is closed
}

func newClientStream() *clientStream {
	return &clientStream{msgs: make(chan []byte, streamBuffer), done: make(chan struct{})}
}

// send is the node's send func: it keeps a copy (the node reuses its buffer).
func (s *clientStream) send(ctx context.Context, n *Node) func([]byte) error {
	return func(b []byte) error {
		select {
		case s.msgs <- bytes.Clone(b):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-n.Done():
			return ErrClosed
		}
	}
}

// recv decodes the next message into m; once the node's side has ended and every
// message is read, its error (io.EOF for none).
func (s *clientStream) recv(m proto.Message) error {
	var b []byte
	select {
	case b = <-s.msgs:
	case <-s.done:
		select {
		case b = <-s.msgs:
		default:
			if s.err == nil {
				return io.EOF
			}
			return s.err
		}
	}
	return proto.Unmarshal(b, m)
}

type subscribeStream struct{ *clientStream }

// Subscribe starts the node's Subscribe on a goroutine of its own, as a server runs a
// handler; it ends when ctx does or the node closes.
func (a appClient) Subscribe(ctx context.Context, req *fanoutv1.SubscribeRequest) (subscribeStream, error) {
	s := newClientStream()
	go func() {
		defer close(s.done)
		s.err = a.n.Subscribe(ctx, req, s.send(ctx, a.n))
	}()
	return subscribeStream{s}, nil
}

func (s subscribeStream) Recv() (*fanoutv1.SubscribeResponse, error) {
	r := new(fanoutv1.SubscribeResponse)
	if err := s.recv(r); err != nil {
		return nil, err
	}
	return r, nil
}

type submitStream struct {
	*clientStream
	reqs      chan []byte // closed by CloseSend
	closeSend sync.Once
}

// SubmitStream starts the node's ServeSubmitStream on a goroutine of its own.
func (a appClient) SubmitStream(ctx context.Context) (*submitStream, error) {
	s := &submitStream{clientStream: newClientStream(), reqs: make(chan []byte, streamBuffer)}
	recv := func(b []byte) ([]byte, error) {
		select {
		case req, ok := <-s.reqs:
			if !ok {
				return b, io.EOF
			}
			return append(b, req...), nil
		case <-ctx.Done():
			return b, ctx.Err()
		}
	}
	go func() {
		defer close(s.done)
		s.err = a.n.ServeSubmitStream(ctx, recv, s.send(ctx, a.n))
	}()
	return s, nil
}

func (s *submitStream) Send(req *fanoutv1.SubmitRequest) error {
	b, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	select {
	case s.reqs <- b:
		return nil
	case <-s.done:
		return io.EOF // the node's side has ended: Recv says why
	}
}

func (s *submitStream) CloseSend() error {
	s.closeSend.Do(func() { close(s.reqs) })
	return nil
}

func (s *submitStream) Recv() (*fanoutv1.SubmitResponse, error) {
	r := new(fanoutv1.SubmitResponse)
	if err := s.recv(r); err != nil {
		return nil, err
	}
	return r, nil
}

// peerClient calls a node as the peer listener does, in process, for a caller that
// did not authenticate (the zero Caller).
type peerClient struct{ n *Node }

func (p peerClient) Replicate(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	return p.n.Replicate(ctx, Caller{}, req)
}

func (p peerClient) Digest(_ context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	return p.n.Digest(req)
}

func (p peerClient) Push(_ context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	return p.n.Push(Caller{}, req)
}
