package fanout

import (
	"context"
	"errors"
	"io"
	"sync"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/antientropy"
	"github.com/fanout/fanout/pkg/batcher"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FanoutServer adapts a Node to fanout.v1.FanoutService: it calls into the node and
// maps domain errors to status codes. Nothing else.
type FanoutServer struct {
	fanoutv1.UnimplementedFanoutServiceServer
	node *Node
}

// PeerServer adapts a Node to fanout.v1.PeerService.
type PeerServer struct {
	fanoutv1.UnimplementedPeerServiceServer
	node *Node
}

// NewFanoutServer returns the app-facing gRPC service of n. Its server must be made
// with frame.ServerOption (or frame.ServerOptions): Subscribe sends frames.
func NewFanoutServer(n *Node) *FanoutServer { return &FanoutServer{node: n} }

// NewPeerServer returns the peer-facing gRPC service of n.
func NewPeerServer(n *Node) *PeerServer { return &PeerServer{node: n} }

// Submit implements FanoutService.Submit for a decoded request. The app listener does
// not use it: RegisterFanoutServer installs submitHandler, which passes the request's
// bytes to the node undecoded (internal/wire reads them).
func (s *FanoutServer) Submit(ctx context.Context, req *fanoutv1.SubmitRequest) (*fanoutv1.SubmitResponse, error) {
	resp, err := s.node.Submit(ctx, req)
	return resp, toStatus(err)
}

// maxStreamWaits bounds the ack-waiting requests one SubmitStream may have open at
// once; past it, reading the stream pauses (flow control pushes back on the client).
const maxStreamWaits = 1024

// SubmitStream implements FanoutService.SubmitStream: one response per request,
// matched by request_id. Requests that wait for acks run concurrently and are answered
// in completion order; QUEUED requests are answered in order as they are read (with
// --data-dir, each once it is on disk: the next requests are applied meanwhile, so
// the requests in flight share commits). A bad request ends the stream with its status
// (INVALID_ARGUMENT naming the field). Requests are read and answered as frames, as
// Submit's are: the server must be made with frame.ServerOption.
func (s *FanoutServer) SubmitStream(stream fanoutv1.FanoutService_SubmitStreamServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	n := s.node
	w := &streamWaits{stream: stream, node: n, sem: make(chan struct{}, maxStreamWaits)}
	defer w.wg.Wait()
	defer w.closeOrdered()
	f := new(frame.Frame) // reused, except by a request that waits (below)
	for {
		err := stream.RecvMsg(f)
		if errors.Is(err, io.EOF) {
			w.closeOrdered()
			w.wg.Wait()
			return w.failed()
		}
		if err != nil {
			return err
		}
		if err := w.failed(); err != nil {
			return err
		}
		c := n.getCall()
		if err := n.readSubmit(f.B, c); err != nil {
			n.putCall(c)
			return toStatus(err)
		}
		switch {
		case n.waitsForAcks(c): // answered on completion
			f = new(frame.Frame) // c's events are f's bytes until c is done
			err = w.start(ctx, func() error {
				defer n.putCall(c)
				if err := n.submitChecked(ctx, c); err != nil {
					return err
				}
				return w.send(c)
			})
		case n.persist != nil: // answered in order, once on disk
			if err = n.submitQueued(ctx, c); err == nil {
				err = w.inOrder(ctx, c) // c's events are not read after prepare
			}
		default: // answered in order, as read
			if err = n.submitQueued(ctx, c); err == nil {
				err = w.send(c)
			}
			n.putCall(c)
		}
		if err != nil {
			return toStatus(err)
		}
	}
}

// streamWaits runs the ack-waiting requests of one SubmitStream. The handler starts
// them and waits for all before returning; stream.SendMsg is serialized by mu.
type streamWaits struct {
	stream grpc.ServerStream
	node   *Node
	sem    chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error       // guarded by mu: the first failure
	out    frame.Frame // guarded by mu: the answer being sent
	// ordered feeds inOrder's goroutine; nil until the first use and after
	// closeOrdered. Used by the handler's goroutine only.
	ordered chan *submitCall
}

func (w *streamWaits) start(ctx context.Context, f func() error) error {
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.sem }()
		if err := f(); err != nil {
			w.fail(err)
		}
	}()
	return nil
}

// inOrder queues c's answer to be sent, after the answers queued before it, once its
// events are on disk (Node.durable); one goroutine, started on first use, does that,
// and gives c back to the node.
func (w *streamWaits) inOrder(ctx context.Context, c *submitCall) error {
	if w.ordered == nil {
		ch := make(chan *submitCall, maxStreamWaits)
		w.ordered = ch
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for c := range ch {
				err := w.node.durable(ctx, c.revision)
				if err == nil {
					err = w.send(c)
				}
				w.node.putCall(c)
				if err != nil {
					w.fail(err)
					for range ch { // the stream ends: drop the rest
					}
					return
				}
			}
		}()
	}
	select {
	case w.ordered <- c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeOrdered ends inOrder's goroutine once it has sent what is queued. Idempotent.
func (w *streamWaits) closeOrdered() {
	if w.ordered != nil {
		close(w.ordered)
		w.ordered = nil
	}
}

func (w *streamWaits) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = toStatus(err)
	}
}

// send answers c on the stream. Its bytes are written into one frame the stream
// reuses: gRPC copies a frame before SendMsg returns (internal/frame's codec).
func (w *streamWaits) send(c *submitCall) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out.B = wire.AppendSubmitResponse(w.out.B[:0], &c.resp)
	return w.stream.SendMsg(&w.out)
}

func (w *streamWaits) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Subscribe implements FanoutService.Subscribe: the node sends list+watch responses
// as frames (their bytes pass through the codec as they are).
func (s *FanoutServer) Subscribe(req *fanoutv1.SubscribeRequest, stream fanoutv1.FanoutService_SubscribeServer) error {
	err := s.node.Subscribe(stream.Context(), req, func(f *frame.Frame) error { return stream.SendMsg(f) })
	return toStatus(err)
}

// Get implements FanoutService.Get.
func (s *FanoutServer) Get(_ context.Context, req *fanoutv1.GetRequest) (*fanoutv1.GetResponse, error) {
	resp, err := s.node.Get(req)
	return resp, toStatus(err)
}

// GetStatus implements FanoutService.GetStatus.
func (s *FanoutServer) GetStatus(context.Context, *fanoutv1.GetStatusRequest) (*fanoutv1.GetStatusResponse, error) {
	return s.node.Status(), nil
}

// Replicate implements PeerService.Replicate for a decoded request. The peer
// listener does not use it: RegisterPeerServer installs a handler that passes the
// request's bytes to the node undecoded (internal/wire reads them).
func (s *PeerServer) Replicate(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	resp, err := s.node.Replicate(ctx, req)
	return resp, toStatus(err)
}

// Digest implements PeerService.Digest (anti-entropy).
func (s *PeerServer) Digest(_ context.Context, req *fanoutv1.DigestRequest) (*fanoutv1.DigestResponse, error) {
	if s.node.Draining() {
		return nil, toStatus(ErrShuttingDown)
	}
	s.node.noteCaller(req.GetNodeId())
	resp, err := s.node.syncer.Digest(req)
	return resp, toStatus(err)
}

// Pull implements PeerService.Pull (anti-entropy).
func (s *PeerServer) Pull(req *fanoutv1.PullRequest, stream fanoutv1.PeerService_PullServer) error {
	if s.node.Draining() {
		return toStatus(ErrShuttingDown)
	}
	return toStatus(s.node.syncer.Pull(req, stream.Send))
}

// Push implements PeerService.Push (anti-entropy).
func (s *PeerServer) Push(ctx context.Context, req *fanoutv1.PushRequest) (*fanoutv1.PushResponse, error) {
	// With peers authenticated, a Push names its caller truly, as a Replicate does:
	// the entries' relayer (sync.go) is then who the certificate says.
	if err := s.node.authorize(ctx, req.GetNodeId()); err != nil {
		return nil, toStatus(err)
	}
	if s.node.Draining() {
		return nil, toStatus(ErrShuttingDown)
	}
	resp, err := s.node.syncer.Push(req)
	return resp, toStatus(err)
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
			return srv.(*PeerServer).node.replicateFrame(ctx, f)
		})
}

// withHandler is a copy of a generated service description (same name, metadata,
// other methods and streams) with the unary method named method served by h; the
// generated description stays as generated.
func withHandler(generated *grpc.ServiceDesc, method string, h grpc.MethodHandler) grpc.ServiceDesc {
	desc := *generated
	desc.Methods = make([]grpc.MethodDesc, 0, len(generated.Methods))
	for _, m := range generated.Methods {
		if m.MethodName == method {
			m.Handler = h
		}
		desc.Methods = append(desc.Methods, m)
	}
	return desc
}

// serveFrame is the body of a generated unary handler with a frame in place of the
// decoded request: the request's bytes, in a pooled frame, go through the
// interceptors to handle, which may not keep the frame. An error of handle reaches
// the interceptors and the caller as its status (toStatus), with no response.
func serveFrame(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor,
	fullMethod string, handle func(context.Context, *frame.Frame) (any, error)) (any, error) {
	f := framePool.Get().(*frame.Frame)
	defer putFrame(f)
	if err := dec(f); err != nil {
		return nil, err
	}
	h := func(ctx context.Context, req any) (any, error) {
		resp, err := handle(ctx, req.(*frame.Frame))
		if err != nil {
			return nil, toStatus(err)
		}
		return resp, nil
	}
	if interceptor == nil {
		return h(ctx, f)
	}
	return interceptor(ctx, f, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}, h)
}

// toStatus maps the node's errors to gRPC status codes. It is the only place in the
// package that chooses a code.
func toStatus(err error) error {
	var inv *InvalidError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &inv):
		return status.Error(codes.InvalidArgument, inv.Error())
	case errors.Is(err, ErrDraining), errors.Is(err, ErrShuttingDown), errors.Is(err, ErrClosed),
		errors.Is(err, batcher.ErrStopped), errors.Is(err, ErrNotDurable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, antientropy.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, antientropy.ErrBusy):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, antientropy.ErrTreeVersion):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.Is(err, ErrForbidden):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, ErrCompacted):
		return status.Error(codes.OutOfRange, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// RegisterFanoutServer registers f as fanout.v1.FanoutService on s. Submit requests
// are read from their bytes (internal/wire) and answered with bytes; SubmitStream and
// Subscribe read and send frames. The wire format is the generated service's
// (withHandler). s must be made with frame.ServerOption (or frame.ServerOptions).
func RegisterFanoutServer(s grpc.ServiceRegistrar, f *FanoutServer) {
	desc := withHandler(&fanoutv1.FanoutService_ServiceDesc, "Submit", submitHandler)
	s.RegisterService(&desc, f)
}

// submitHandler is the generated Submit handler with frames in place of the decoded
// request and response.
func submitHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	return serveFrame(srv, ctx, dec, interceptor, fanoutv1.FanoutService_Submit_FullMethodName,
		func(ctx context.Context, f *frame.Frame) (any, error) {
			return srv.(*FanoutServer).node.submitFrame(ctx, f)
		})
}
