package fanout

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/peers"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ReplicateStream implements PeerService.ReplicateStream: the batches of one peer
// connection, answered one by one in the order they arrive, each as Replicate would
// answer it (peer.proto). A batch that fails is answered with its status and the
// stream goes on; bytes that are no ReplicateStreamRequest end the stream
// (INVALID_ARGUMENT): the sender is broken, not one of its batches.
func (s *PeerServer) ReplicateStream(stream fanoutv1.PeerService_ReplicateStreamServer) error {
	err := s.node.serveReplicateStream(stream)
	if _, ok := status.FromError(err); ok {
		return err // nil, or the stream's own (RecvMsg, SendMsg): as gRPC gave it
	}
	return toStatus(err)
}

// serveReplicateStream runs one ReplicateStream until the sender closes it, it breaks,
// or the node closes. The requests are read as frames (the server's codec,
// frame.ServerOption) and their batches with internal/wire, as replicateFrame
// reads a unary one.
func (n *Node) serveReplicateStream(stream grpc.ServerStream) error {
	if n.draining.Load() {
		return ErrShuttingDown
	}
	// The largest request this node takes, so that the sender splits a batch before
	// sending it rather than losing the stream to gRPC's refusal.
	md := metadata.Pairs(peers.MaxRecvBytesHeader, strconv.Itoa(n.cfg.PeerMessageBytes()))
	if err := stream.SendHeader(md); err != nil {
		return err
	}
	var sendMu sync.Mutex // the answers and the goodbye share the stream
	send := func(m *fanoutv1.ReplicateStreamResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.SendMsg(m)
	}
	// When the node closes, the sender is told to close the stream (seq 0 with a
	// code), which ends RecvMsg below: nothing else can end a RecvMsg but the stream
	// itself. context.AfterFunc starts a goroutine only then, so an open stream costs
	// none; the handler waits for it if it started.
	goodbye := make(chan struct{})
	stop := context.AfterFunc(n.ctx, func() {
		defer close(goodbye)
		_ = send(&fanoutv1.ReplicateStreamResponse{Code: uint32(codes.Unavailable), Message: ErrShuttingDown.Error()})
	})
	defer func() {
		if !stop() {
			<-goodbye
		}
	}()

	f := framePool.Get().(*frame.Frame)
	defer putFrame(f)
	ctx := stream.Context()
	var req wire.Replicate
	for {
		if err := stream.RecvMsg(f); err != nil {
			if errors.Is(err, io.EOF) {
				return nil // the sender closed the stream
			}
			return err
		}
		req = wire.Replicate{Events: req.Events[:0], Submitted: req.Submitted[:0]}
		seq, err := wire.ParseReplicateStream(f.B, &req)
		if err != nil {
			return errNotProtobuf
		}
		out := &fanoutv1.ReplicateStreamResponse{Seq: seq}
		resp, err := n.replicateParsed(ctx, &req)
		if err != nil {
			st := status.Convert(toStatus(err))
			out.Code, out.Message = uint32(st.Code()), st.Message()
		} else {
			out.Result = resp
		}
		if err := send(out); err != nil {
			return err
		}
	}
}
