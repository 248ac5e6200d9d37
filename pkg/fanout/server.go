package fanout

import (
	"context"
	"errors"
	"io"
	"sync"
	"unicode/utf8"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/pkg/batcher"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
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

// NewFanoutServer returns the app-facing gRPC service of n.
func NewFanoutServer(n *Node) *FanoutServer { return &FanoutServer{node: n} }

// NewPeerServer returns the peer-facing gRPC service of n.
func NewPeerServer(n *Node) *PeerServer { return &PeerServer{node: n} }

// Submit implements FanoutService.Submit.
func (s *FanoutServer) Submit(ctx context.Context, req *fanoutv1.SubmitRequest) (*fanoutv1.SubmitResponse, error) {
	resp, err := s.node.Submit(ctx, req)
	return resp, toStatus(err)
}

// maxStreamWaits bounds the ack-waiting requests one SubmitStream may have open at
// once; past it, reading the stream pauses (flow control pushes back on the client).
const maxStreamWaits = 1024

// SubmitStream implements FanoutService.SubmitStream: one response per request,
// matched by request_id. Requests that wait for acks run concurrently and are answered
// in completion order; QUEUED requests are answered in order as they are read. A bad
// request ends the stream with its status (INVALID_ARGUMENT naming the field).
func (s *FanoutServer) SubmitStream(stream fanoutv1.FanoutService_SubmitStreamServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	w := &streamWaits{stream: stream, sem: make(chan struct{}, maxStreamWaits)}
	defer w.wg.Wait()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			w.wg.Wait()
			return w.failed()
		}
		if err != nil {
			return err
		}
		if err := w.failed(); err != nil {
			return err
		}
		if err := s.node.precheck(req); err != nil {
			return toStatus(err)
		}
		submit := func() error {
			resp, err := s.node.submitChecked(ctx, req)
			if err != nil {
				return err
			}
			return w.send(resp)
		}
		if !s.node.WaitsForAcks(req) {
			err = submit() // QUEUED: answered in order, as read
		} else {
			err = w.start(ctx, submit) // waits for acks: answered on completion
		}
		if err != nil {
			return toStatus(err)
		}
	}
}

// streamWaits runs the ack-waiting requests of one SubmitStream. The handler starts
// them and waits for all before returning; stream.Send is serialized by mu.
type streamWaits struct {
	stream fanoutv1.FanoutService_SubmitStreamServer
	sem    chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error // guarded by mu: the first failure
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
			w.mu.Lock()
			if w.err == nil {
				w.err = toStatus(err)
			}
			w.mu.Unlock()
		}
	}()
	return nil
}

func (w *streamWaits) send(resp *fanoutv1.SubmitResponse) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stream.Send(resp)
}

func (w *streamWaits) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Subscribe implements FanoutService.Subscribe.
func (s *FanoutServer) Subscribe(req *fanoutv1.SubscribeRequest, stream fanoutv1.FanoutService_SubscribeServer) error {
	prefix := req.GetTaskIdPrefix()
	if len(prefix) > s.node.cfg.Limits.MaxTaskIDBytes || !utf8.ValidString(prefix) {
		return status.Errorf(codes.InvalidArgument, "task_id_prefix: must be at most %d bytes of UTF-8", s.node.cfg.Limits.MaxTaskIDBytes)
	}
	if mb := req.GetMaxBatch(); mb > uint32(s.node.cfg.Limits.MaxEvents) {
		return status.Errorf(codes.InvalidArgument, "max_batch: %d, at most %d", mb, s.node.cfg.Limits.MaxEvents)
	}
	ctx := stream.Context()
	sub, cancel := s.node.inbox.subscribe(prefix, ctx.Done())
	batch := make([]delivery, 0, max(1, int(req.GetMaxBatch())))
	var out responder
	for {
		select {
		case d := <-sub.ch:
			batch = takeReady(sub.ch, append(batch[:0], d))
			err := stream.Send(out.of(batch))
			out.reset()
			if err != nil {
				cancel(batch...) // not sent: back to the inbox with the rest of the buffer
				return err
			}
			s.node.inbox.deliver.Add(uint64(len(batch)))
		case <-ctx.Done():
			cancel()
			return status.FromContextError(ctx.Err()).Err()
		case <-s.node.Done():
			cancel()
			return status.Error(codes.Unavailable, "sidecar shutting down")
		}
	}
}

// takeReady appends deliveries already waiting in ch, up to cap(batch), without waiting.
func takeReady(ch <-chan delivery, batch []delivery) []delivery {
	for len(batch) < cap(batch) {
		select {
		case d := <-ch:
			batch = append(batch, d)
		default:
			return batch
		}
	}
	return batch
}

// responder builds one stream's responses in memory it reuses: Send has encoded a
// message when it returns, so the next one can overwrite it. A stream allocates its
// slabs once instead of a message and a timestamp per event (GC was the top of a
// saturated receiver's profile). grpc-go warns that stats handlers and tracing may read
// a sent message lazily; the sidecar installs neither (its metrics are interceptors
// that count messages), and a test sends through reused memory and checks every event.
type responder struct {
	top    fanoutv1.SubscribeResponse
	stamp  timestamppb.Timestamp
	items  []fanoutv1.SubscribeResponse
	stamps []timestamppb.Timestamp
	ptrs   []*fanoutv1.SubscribeResponse
}

// of is one delivery as a plain response, or several in its batch field.
func (r *responder) of(batch []delivery) *fanoutv1.SubscribeResponse {
	if len(batch) == 1 {
		batch[0].fill(&r.top, &r.stamp)
		return &r.top
	}
	if cap(r.items) < len(batch) {
		r.items = make([]fanoutv1.SubscribeResponse, len(batch))
		r.stamps = make([]timestamppb.Timestamp, len(batch))
		r.ptrs = make([]*fanoutv1.SubscribeResponse, len(batch))
	}
	r.ptrs = r.ptrs[:len(batch)]
	for i, d := range batch {
		d.fill(&r.items[i], &r.stamps[i])
		r.ptrs[i] = &r.items[i]
	}
	r.top.Batch = r.ptrs
	return &r.top
}

// reset drops the last response's references to events, keeping the memory.
func (r *responder) reset() {
	r.top.Reset()
	for i := range r.ptrs {
		r.items[i].Reset()
	}
}

// fill writes d into r, using ts for submitted_at.
func (d delivery) fill(r *fanoutv1.SubscribeResponse, ts *timestamppb.Timestamp) {
	r.Event, r.OriginNode, r.SubmittedAt = d.event, d.origin, nil
	if d.submitted != 0 {
		ts.Seconds, ts.Nanos = d.submitted/1e9, int32(d.submitted%1e9)
		r.SubmittedAt = ts
	}
}

// GetStatus implements FanoutService.GetStatus.
func (s *FanoutServer) GetStatus(context.Context, *fanoutv1.GetStatusRequest) (*fanoutv1.GetStatusResponse, error) {
	return s.node.Status(), nil
}

// Replicate implements PeerService.Replicate.
func (s *PeerServer) Replicate(ctx context.Context, req *fanoutv1.ReplicateRequest) (*fanoutv1.ReplicateResponse, error) {
	resp, err := s.node.Replicate(ctx, req)
	return resp, toStatus(err)
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
	case errors.Is(err, ErrDraining), errors.Is(err, ErrClosed), errors.Is(err, batcher.ErrStopped):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default:
		return status.Error(codes.Internal, err.Error())
	}
}
