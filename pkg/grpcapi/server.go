package grpcapi

import (
	"context"
	"errors"
	"io"
	"sync"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/pkg/antientropy"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/fanout"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FanoutServer adapts a Node to fanout.v1.FanoutService: it calls into the node and
// maps domain errors to status codes. Nothing else.
type FanoutServer struct {
	fanoutv1.UnimplementedFanoutServiceServer
	node *fanout.Node
}

// NewFanoutServer returns the app-facing gRPC service of n. Its server must be made
// with frame.ServerOption (or frame.ServerOptions): Subscribe sends frames.
func NewFanoutServer(n *fanout.Node) *FanoutServer { return &FanoutServer{node: n} }

// Submit implements FanoutService.Submit for a decoded request. The app listener does
// not use it: RegisterFanoutServer installs submitHandler, which passes the request's
// bytes to the node undecoded (Node.SubmitBytes).
func (s *FanoutServer) Submit(ctx context.Context, req *fanoutv1.SubmitRequest) (*fanoutv1.SubmitResponse, error) {
	resp, err := s.node.Submit(ctx, req)
	return resp, toStatus(err)
}

// SubmitStream implements FanoutService.SubmitStream (Node.ServeSubmitStream: one
// response per request, matched by request_id). Requests are read and answered as
// frames, as Submit's are: the server must be made with frame.ServerOption. A bad
// request ends the stream with its status (INVALID_ARGUMENT naming the field); an
// error of the stream itself (RecvMsg) ends it as gRPC gave it.
func (s *FanoutServer) SubmitStream(stream fanoutv1.FanoutService_SubmitStreamServer) error {
	var in, out frame.Frame // reused: the node owns in's buffer, the codec copies out's
	var recvErr error
	recv := func(b []byte) ([]byte, error) {
		in.B = b
		err := stream.RecvMsg(&in)
		if err != nil && !errors.Is(err, io.EOF) {
			recvErr = err
		}
		return in.B, err
	}
	send := func(b []byte) error {
		out.B = b
		return stream.SendMsg(&out)
	}
	err := s.node.ServeSubmitStream(stream.Context(), recv, send)
	if err != nil && err == recvErr {
		return err
	}
	return toStatus(err)
}

// Subscribe implements FanoutService.Subscribe: the node sends list+watch responses
// as bytes, which go out as a frame (they pass through the codec as they are).
func (s *FanoutServer) Subscribe(req *fanoutv1.SubscribeRequest, stream fanoutv1.FanoutService_SubscribeServer) error {
	var f frame.Frame // reused: the codec copies it before SendMsg returns
	err := s.node.Subscribe(stream.Context(), req, func(b []byte) error {
		f.B = b
		return stream.SendMsg(&f)
	})
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
			b, err := srv.(*FanoutServer).node.SubmitBytes(ctx, f.B)
			if err != nil {
				return nil, err
			}
			return &frame.Frame{B: b}, nil
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

// framePool recycles the frames requests are read into (serveFrame).
var framePool = sync.Pool{New: func() any { return new(frame.Frame) }}

// putFrame gives f back to framePool, unless it holds a huge request's buffer.
func putFrame(f *frame.Frame) {
	if cap(f.B) <= 4<<20 {
		framePool.Put(f)
	}
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

// toStatus maps the node's errors to gRPC status codes. It is the only place that
// chooses a code for them.
func toStatus(err error) error {
	var inv *fanout.InvalidError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &inv):
		return status.Error(codes.InvalidArgument, inv.Error())
	case errors.Is(err, fanout.ErrDraining), errors.Is(err, fanout.ErrShuttingDown), errors.Is(err, fanout.ErrClosed),
		errors.Is(err, batcher.ErrStopped), errors.Is(err, fanout.ErrNotDurable):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, antientropy.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, antientropy.ErrBusy):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, antientropy.ErrTreeVersion):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, fanout.ErrUnauthenticated):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.Is(err, fanout.ErrForbidden):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, fanout.ErrCompacted):
		return status.Error(codes.OutOfRange, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		return status.Error(codes.Internal, err.Error())
	}
}
