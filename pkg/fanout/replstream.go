package fanout

import (
	"context"
	"errors"
	"io"
	"sync"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
)

// ReplicateStream is one peer's replicate stream (PeerService.ReplicateStream) as the
// node serves it: the batches of one peer connection, answered one by one in the
// order they arrive. The edge implements it over its transport (pkg/grpcapi over a
// gRPC stream, where the limit is a header and a failure is a status code).
type ReplicateStream interface {
	// Context is the stream's: it ends when the stream does.
	Context() context.Context
	// Limit tells the sender, before any answer, the largest request this node takes,
	// so that it splits a batch before sending it rather than losing the stream to a
	// refusal.
	Limit(maxRecvBytes int) error
	// Recv appends the next request's bytes (a ReplicateStreamRequest) to b[:0] and
	// returns them, or io.EOF once the sender has closed the stream.
	Recv(b []byte) ([]byte, error)
	// Answer sends the answer to the batch under seq: resp, or the batch's failure
	// err (the node's error; the edge says it as Replicate's would be said). seq 0
	// with ErrShuttingDown is the goodbye: the node is closing and asks the sender to
	// close the stream. The node never calls Answer concurrently.
	Answer(seq uint64, resp *fanoutv1.ReplicateResponse, err error) error
}

// ServeReplicateStream runs one replicate stream from the peer from until the sender
// closes it (nil), it breaks (the error of s, as it is), or the node closes. Each
// batch is answered as Replicate would answer it (peer.proto): a batch that fails is
// answered with its error and the stream goes on; bytes that are no
// ReplicateStreamRequest end the stream with an *InvalidError (the sender is broken,
// not one of its batches); a draining node takes no stream (ErrShuttingDown). The
// batches are read with internal/wire, as ReplicateBytes reads a unary one.
func (n *Node) ServeReplicateStream(s ReplicateStream, from Caller) error {
	if n.draining.Load() {
		return ErrShuttingDown
	}
	if err := s.Limit(n.cfg.PeerMessageBytes()); err != nil {
		return err
	}
	var sendMu sync.Mutex // the answers and the goodbye share the stream
	answer := func(seq uint64, resp *fanoutv1.ReplicateResponse, err error) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return s.Answer(seq, resp, err)
	}
	// When the node closes, the sender is told to close the stream (seq 0 with
	// ErrShuttingDown), which ends Recv below: nothing else can end a Recv but the
	// stream itself. context.AfterFunc starts a goroutine only then, so an open
	// stream costs none; ServeReplicateStream waits for it if it started.
	goodbye := make(chan struct{})
	stop := context.AfterFunc(n.ctx, func() {
		defer close(goodbye)
		_ = answer(0, nil, ErrShuttingDown)
	})
	defer func() {
		if !stop() {
			<-goodbye
		}
	}()

	ctx := s.Context()
	var b []byte // one request's bytes; reused
	var req wire.Replicate
	for {
		var err error
		if b, err = s.Recv(b[:0]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the sender closed the stream
			}
			return err
		}
		req = wire.Replicate{Events: req.Events[:0], Submitted: req.Submitted[:0]}
		seq, err := wire.ParseReplicateStream(b, &req)
		if err != nil {
			return errNotProtobuf
		}
		resp, err := n.replicateParsed(ctx, from, &req)
		if err := answer(seq, resp, err); err != nil {
			return err
		}
	}
}
