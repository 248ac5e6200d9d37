package grpcapi

import (
	"context"
	"strconv"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/pkg/fanout"
	"github.com/fanout/fanout/pkg/peers"
	"github.com/fanout/fanout/pkg/peertls"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// PeerServer adapts a Node and its mesh to fanout.v1.PeerService: Replicate and the
// replicate stream go to the node (its receive path), anti-entropy to the mesh. Each
// call's caller is read from its connection (the verified client certificate of
// mutual TLS) and handed to the node as a fanout.Caller; the node decides with it
// (fanout.Config.AuthenticatePeers).
type PeerServer struct {
	fanoutv1.UnimplementedPeerServiceServer
	node *fanout.Node
	mesh Mesh
	// callerIDs reads the identities of the peer that made the call in ctx, and ok
	// false if the call was not authenticated: peertls.Caller. Tests set their own.
	callerIDs func(ctx context.Context) (ids []string, ok bool)
}

// Mesh is the mesh's side of the PeerService (*mesh.Mesh): its answers to a peer's
// anti-entropy calls, and the largest request the peer listener takes.
type Mesh interface {
	Digest(req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error)
	Pull(req *fanoutv1.PullRequest, send func(*fanoutv1.PullResponse) error) error
	Push(req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error)
	PeerMessageBytes() int
}

// NewPeerServer returns the peer-facing gRPC service of n and its mesh m.
func NewPeerServer(n *fanout.Node, m Mesh) *PeerServer {
	return &PeerServer{node: n, mesh: m, callerIDs: peertls.Caller}
}

// caller is the peer that made the call in ctx, as data for the node.
func (s *PeerServer) caller(ctx context.Context) fanout.Caller {
	ids, ok := s.callerIDs(ctx)
	return fanout.Caller{IDs: ids, Authenticated: ok}
}

// Replicate implements PeerService.Replicate for a decoded request. The peer
// listener does not use it: RegisterPeerServer installs a handler that passes the
// request's bytes to the node undecoded (Node.ReplicateBytes).
func (s *PeerServer) Replicate(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	resp, err := s.node.Replicate(ctx, s.caller(ctx), req)
	return resp, toStatus(err)
}

// Digest implements PeerService.Digest (anti-entropy). A draining node takes no
// anti-entropy call (UNAVAILABLE).
func (s *PeerServer) Digest(_ context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	if s.node.Draining() {
		return nil, toStatus(fanout.ErrShuttingDown)
	}
	resp, err := s.mesh.Digest(req) // notes a caller not in the peer set
	return resp, toStatus(err)
}

// Pull implements PeerService.Pull (anti-entropy).
func (s *PeerServer) Pull(req *fanoutv1.PullRequest, stream fanoutv1.PeerService_PullServer) error {
	if s.node.Draining() {
		return toStatus(fanout.ErrShuttingDown)
	}
	return toStatus(s.mesh.Pull(req, stream.Send))
}

// Push implements PeerService.Push (anti-entropy). With peers authenticated, a Push
// names its caller truly, as a Replicate does: the entries' relayer is then who the
// certificate says.
func (s *PeerServer) Push(ctx context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	if err := s.node.Authorize(s.caller(ctx), req.GetNodeId()); err != nil {
		return nil, toStatus(err)
	}
	if s.node.Draining() {
		return nil, toStatus(fanout.ErrShuttingDown)
	}
	resp, err := s.mesh.Push(req)
	return resp, toStatus(err)
}

// ReplicateStream implements PeerService.ReplicateStream (Node.ServeReplicateStream):
// the batches of one peer connection, answered one by one in the order they arrive,
// each as Replicate would answer it (peer.proto). A batch that fails is answered with
// its status and the stream goes on; bytes that are no ReplicateStreamRequest end the
// stream (INVALID_ARGUMENT): the sender is broken, not one of its batches.
func (s *PeerServer) ReplicateStream(stream fanoutv1.PeerService_ReplicateStreamServer) error {
	err := s.node.ServeReplicateStream(&replStream{stream: stream, limit: s.mesh.PeerMessageBytes()}, s.caller(stream.Context()))
	if _, ok := status.FromError(err); ok {
		return err // nil, or the stream's own (RecvMsg, SendMsg): as gRPC gave it
	}
	return toStatus(err)
}

// replStream is a ReplicateStream's gRPC stream as the node serves it. The requests
// are read as frames (the server's codec, frame.ServerOption).
type replStream struct {
	stream grpc.ServerStream
	limit  int         // the largest request the peer listener takes (mesh.Config.PeerMessageBytes)
	in     frame.Frame // the request being read; the node owns its buffer
}

var _ fanout.ReplicateStream = (*replStream)(nil)

func (r *replStream) Context() context.Context { return r.stream.Context() }

// Limit sends the largest request the peer listener takes as the stream's header
// (peers.MaxRecvBytesHeader), which the sender reads before its first batch.
func (r *replStream) Limit() error {
	return r.stream.SendHeader(metadata.Pairs(peers.MaxRecvBytesHeader, strconv.Itoa(r.limit)))
}

func (r *replStream) Recv(b []byte) ([]byte, error) {
	r.in.B = b
	err := r.stream.RecvMsg(&r.in)
	return r.in.B, err
}

// Answer sends a batch's answer: its result, or its failure as the status its
// unary Replicate would have ended with (code and message), so that the sender
// classifies both by the same table. The goodbye (seq 0, ErrShuttingDown) is
// UNAVAILABLE.
func (r *replStream) Answer(seq uint64, resp *fanoutv1.ReplicateResponse, err error, okSeqs []uint64) error {
	out := &fanoutv1.ReplicateStreamResponse{Seq: seq, OkSeqs: okSeqs}
	if err != nil {
		st := status.Convert(toStatus(err))
		out.Code, out.Message = uint32(st.Code()), st.Message()
	} else {
		out.Result = resp
	}
	return r.stream.SendMsg(out)
}

// RegisterPeerServer registers p as fanout.v1.PeerService on s. Replicate requests are
// read from their bytes (internal/wire). The wire format is the generated service's
// (withHandler). s must be made with frame.ServerOption (or frame.ServerOptions).
func RegisterPeerServer(s grpc.ServiceRegistrar, p *PeerServer) {
	desc := withHandler(&fanoutv1.PeerService_ServiceDesc, "Replicate", replicateHandler)
	s.RegisterService(&desc, p)
}

// replicateHandler is the generated Replicate handler with a frame in place of the
// decoded request.
func replicateHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	return serveFrame(srv, ctx, dec, interceptor, fanoutv1.PeerService_Replicate_FullMethodName,
		func(ctx context.Context, f *frame.Frame) (any, error) {
			ps := srv.(*PeerServer)
			return ps.node.ReplicateBytes(ctx, ps.caller(ctx), f.B)
		})
}
