package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxRecvBytesHeader is the header metadata key in which a ReplicateStream's receiver
// says the largest request message it accepts (peer.proto).
const MaxRecvBytesHeader = "fanout-max-recv-bytes"

// unaryFor is how long a Conn sends unary Replicate calls after its peer answered
// ReplicateStream UNIMPLEMENTED (a sidecar from before API v1.1) before it tries a
// stream again: a rolling upgrade replaces the peer within minutes, and one refused
// stream a minute costs nothing.
const unaryFor = time.Minute

// replStream is one ReplicateStream: the batches of every worker of a link travel on
// it, each under its own seq, and a reader goroutine hands each answer to the batch
// waiting for it. The window, how many batches are in flight at once, is the number
// of callers: a link's batcher workers, one batch each.
//
// Invariants: err is set once and never cleared, and from then on no batch is added
// to waiters; every waiter gets exactly one answer (its own, or err); cs is written
// before ready is closed and only read after.
type replStream struct {
	conn    *Conn
	ctx     context.Context // the stream's lifetime: canceled by fail and by Conn.Close
	cancel  context.CancelFunc
	ready   chan struct{} // closed once the stream is open, or failed to open
	cs      fanoutv1.PeerService_ReplicateStreamClient
	sendSem chan struct{} // one SendMsg at a time (gRPC streams allow one sender)

	mu      sync.Mutex
	seq     uint64            // the last seq given out; guarded by mu
	waiters map[uint64]waiter // batches sent, not yet answered; guarded by mu
	err     error             // why the stream ended; guarded by mu
}

type waiter struct {
	ch   chan *answer
	size int // of the message sent: tells the batch the peer refused as too large
}

type answer struct {
	resp *fanoutv1.ReplicateResponse
	err  error // a status error: the batch's own, or the stream's
}

// newStream starts opening a stream; its goroutine belongs to c (Close waits for it).
func (c *Conn) newStream() *replStream {
	ctx, cancel := context.WithCancel(c.ctx)
	s := &replStream{conn: c, ctx: ctx, cancel: cancel, ready: make(chan struct{}),
		sendSem: make(chan struct{}, 1), waiters: make(map[uint64]waiter)}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		s.run()
	}()
	return s
}

// run opens the stream, reads the receiver's limit from its header, then reads
// answers until the stream ends. It does not wait for the header before the first
// batch is sent: a receiver need not send it before it has a request.
func (s *replStream) run() {
	defer s.cancel()
	cs, err := s.conn.client.ReplicateStream(s.ctx)
	if err != nil {
		s.fail(err) // before ready: a batch that finds ready closed finds err or cs
		close(s.ready)
		return
	}
	s.cs = cs
	close(s.ready)
	md, err := cs.Header()
	if err != nil {
		s.fail(err)
		return
	}
	if v := md.Get(MaxRecvBytesHeader); len(v) > 0 { // none: an older or other receiver
		if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n > 0 {
			s.conn.peerMax.Store(n)
		}
	}
	for {
		m, err := s.cs.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) { // the receiver ended the stream without a status
				err = status.Error(codes.Unavailable, "the peer closed the replicate stream")
			}
			s.fail(err)
			return
		}
		if m.GetSeq() == 0 {
			if m.GetCode() != 0 { // the receiver is closing the stream
				s.fail(status.Error(codes.Code(m.GetCode()), m.GetMessage()))
				return
			}
			continue
		}
		s.mu.Lock()
		w, ok := s.waiters[m.GetSeq()]
		delete(s.waiters, m.GetSeq())
		s.mu.Unlock()
		ch := w.ch
		if !ok {
			continue // not a seq sent on this stream: ignored
		}
		if c := codes.Code(m.GetCode()); c != codes.OK {
			ch <- &answer{err: status.Error(c, m.GetMessage())}
		} else {
			ch <- &answer{resp: m.GetResult()}
		}
	}
}

// fail ends the stream with err (the first error wins) and answers every batch in
// flight with it.
func (s *replStream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	err = s.err
	waiters := s.waiters
	s.waiters = nil
	s.mu.Unlock()
	s.cancel()
	// The peer refused one message as too large, which ends the whole stream: that
	// batch gets the refusal (the batcher splits it, or drops an event alone); the
	// others were fine and are sent again after the congestion pause, which does
	// not count against the breaker. The limit the refusal names holds from now on.
	size, limit, refused := refusedSize(err)
	if refused {
		s.conn.peerMax.Store(int64(limit))
	}
	for _, w := range waiters {
		if refused && w.size != size {
			w.ch <- &answer{err: errInnocent}
			continue
		}
		w.ch <- &answer{err: err}
	}
}

func (s *replStream) broken() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// do sends one batch and waits for its answer. A batch whose ctx ends first ends the
// stream (its other batches are answered with the same error): the next batch opens
// a fresh stream, as the next unary call would start afresh. The error is a status
// error or a context error, unclassified.
func (s *replStream) do(ctx context.Context, f *frame.Frame) (*fanoutv1.ReplicateResponse, error) {
	select {
	case <-s.ready:
	case <-ctx.Done():
		s.fail(ctx.Err()) // an open that outlasts a batch's deadline: start over
		return nil, ctx.Err()
	}
	ch := make(chan *answer, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	s.seq++
	seq := s.seq
	size := wire.ReplicateStreamHeadSize(seq, len(f.B)) + len(f.B)
	if limit := s.conn.sendLimit(); int64(size) > limit {
		s.mu.Unlock()
		// As gRPC says it when it refuses to send a message: ErrTooLarge (Classify).
		return nil, status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", size, limit)
	}
	s.waiters[seq] = waiter{ch: ch, size: size}
	s.mu.Unlock()

	select {
	case s.sendSem <- struct{}{}:
	case a := <-ch: // the stream ended while this batch waited to be sent
		return a.resp, a.err
	case <-ctx.Done():
		s.fail(ctx.Err())
		return nil, ctx.Err()
	}
	err := s.cs.SendMsg(&streamFrame{seq: seq, batch: f.B})
	<-s.sendSem
	if err != nil && !errors.Is(err, io.EOF) {
		s.fail(err) // gRPC ended the stream for an error of this send
	} // io.EOF: the stream has ended; the reader gets its status and answers
	select {
	case a := <-ch:
		return a.resp, a.err
	case <-ctx.Done():
		s.fail(ctx.Err())
		return nil, ctx.Err()
	}
}

// streamFrame is a ReplicateStreamRequest whose batch is an encoded ReplicateRequest:
// the codec (a frame.Appender) writes the head and the batch into one pooled buffer.
type streamFrame struct {
	seq   uint64
	batch []byte
}

var _ frame.Appender = (*streamFrame)(nil)

// EncodedSize is the size of the request: its head, then the batch's bytes.
func (f *streamFrame) EncodedSize() int {
	return wire.ReplicateStreamHeadSize(f.seq, len(f.batch)) + len(f.batch)
}

// AppendEncoded appends the request's head, then the batch's bytes as they are.
func (f *streamFrame) AppendEncoded(b []byte) []byte {
	return append(wire.AppendReplicateStreamHead(b, f.seq, len(f.batch)), f.batch...)
}

// stream returns the stream to send on, opening one if there is none or the last one
// ended; nil when batches go as unary calls.
func (c *Conn) stream() *replStream {
	if c.unary {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || time.Now().Before(c.unaryUntil) {
		return nil
	}
	if c.st == nil || c.st.broken() {
		c.st = c.newStream()
	}
	return c.st
}

// fallBack makes c send unary calls for unaryFor: its peer has no ReplicateStream.
func (c *Conn) fallBack() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unaryUntil = time.Now().Add(unaryFor)
}

// errUnimplemented reports whether err is the peer refusing ReplicateStream.
func errUnimplemented(err error) bool {
	return status.Code(err) == codes.Unimplemented
}

// errInnocent answers a batch in flight on a stream that another batch's size
// refusal ended: RESOURCE_EXHAUSTED without gRPC's "larger than max", so congestion.
var errInnocent = status.Error(codes.ResourceExhausted, "the replicate stream ended because another batch on it was too large for the peer; sent again")

// refusedSize reads gRPC's "received message larger than max (N vs. M)", the
// receiver refusing a message of N bytes for its limit M.
func refusedSize(err error) (size, limit int, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.ResourceExhausted {
		return 0, 0, false
	}
	msg := st.Message()
	i := strings.Index(msg, "received message larger than max (")
	if i < 0 {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(msg[i+len("received message larger than max ("):], "%d vs. %d)", &size, &limit); err != nil || limit <= 0 {
		return 0, 0, false
	}
	return size, limit, true
}

// sendLimit is the largest message sent to the peer: this connection's limit, and
// the peer's once known (from a stream's header, or from a refusal).
func (c *Conn) sendLimit() int64 {
	limit := int64(c.max)
	if p := c.peerMax.Load(); p > 0 {
		limit = min(limit, p)
	}
	return limit
}
