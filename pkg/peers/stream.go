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
// A batch sent with a hold (answer_hold_micros) is answered later by a seq in some
// message's ok_seqs: the reader makes it the answer a Replicate call would give, every
// status OK, with the peer's node id and incarnation as last heard on the stream.
//
// Invariants: err is set once and never cleared, and from then on no batch is added
// to waiters; every waiter gets exactly one answer (its own, or err); held counts
// the waiters sent with a hold; cs is written before ready is closed and only read
// after.
type replStream struct {
	conn   *Conn
	ctx    context.Context // the stream's lifetime: canceled by fail and by Conn.Close
	cancel context.CancelFunc
	ready  chan struct{} // closed once the stream is open, or failed to open
	// header is closed once the receiver's header has come (its limit, if it says
	// one, is in Conn.peerMax by then), or the stream failed before it.
	header  chan struct{}
	cs      fanoutv1.PeerService_ReplicateStreamClient
	sendSem chan struct{} // one SendMsg at a time (gRPC streams allow one sender)

	mu      sync.Mutex
	seq     uint64            // the last seq given out; guarded by mu
	waiters map[uint64]waiter // batches sent, not yet answered; guarded by mu
	err     error             // why the stream ended; guarded by mu
	held    int               // waiters sent with a hold; guarded by mu
	// prompt is when a batch was last sent to be answered at once; guarded by mu.
	prompt time.Time

	// The reader goroutine's own: the peer's identity as last answered, and a
	// read-only run of ITEM_STATUS_OK that held answers share (replaced, never
	// written, when a longer one is needed).
	nodeID      string
	incarnation uint64
	ok          []fanoutv1.ItemStatus
}

// headerWait bounds how long a new stream's first batches wait for the receiver's
// header. A fanout receiver sends it as the stream opens (one round trip); a receiver
// that sends none before its first answer is sent batches after this long, at
// this node's own limit.
const headerWait = time.Second

// promptEvery: a stream sends at least one batch this often without a hold, when it
// sends any, so that the round-trip histogram keeps its samples and the peer's
// answers keep naming it.
const promptEvery = 100 * time.Millisecond

type waiter struct {
	ch     chan *answer
	size   int  // of the message sent: tells the batch the peer refused as too large
	events int  // in the batch: a held answer has one status per event
	held   bool // sent with a hold: counted in replStream.held
}

type answer struct {
	resp *fanoutv1.ReplicateResponse
	err  error // a status error: the batch's own, or the stream's
}

// newStream starts opening a stream; its goroutine belongs to c (Close waits for it).
func (c *Conn) newStream() *replStream {
	ctx, cancel := context.WithCancel(c.ctx)
	s := &replStream{conn: c, ctx: ctx, cancel: cancel, ready: make(chan struct{}), header: make(chan struct{}),
		sendSem: make(chan struct{}, 1), waiters: make(map[uint64]waiter)}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		s.run()
	}()
	return s
}

// run opens the stream, reads the receiver's limit from its header, then reads
// answers until the stream ends. Batches wait for the header (up to headerWait) so
// that none goes over the limit it says: the peer would end the stream for it,
// and every other batch in flight on it with it.
func (s *replStream) run() {
	defer s.cancel()
	cs, err := s.conn.client.ReplicateStream(s.ctx)
	if err != nil {
		s.fail(err) // before ready: a batch that finds ready closed finds err or cs
		close(s.ready)
		close(s.header)
		return
	}
	s.cs = cs
	close(s.ready)
	md, err := cs.Header()
	if err != nil {
		s.fail(err) // before header: a batch that finds header closed finds err
		close(s.header)
		return
	}
	if v := md.Get(MaxRecvBytesHeader); len(v) > 0 { // none: an older or other receiver
		if n, err := strconv.ParseInt(v[0], 10, 64); err == nil && n > 0 {
			s.conn.peerMax.Store(n)
		}
	}
	close(s.header)
	for {
		m, err := s.cs.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) { // the receiver ended the stream without a status
				err = status.Error(codes.Unavailable, "the peer closed the replicate stream")
			}
			s.fail(err)
			return
		}
		if r := m.GetResult(); r.GetNodeId() != "" {
			s.nodeID, s.incarnation = r.GetNodeId(), r.GetIncarnation()
		}
		for _, seq := range m.GetOkSeqs() { // held answers, before the rest: they were sent before
			if w, ok := s.take(seq); ok {
				w.ch <- &answer{resp: &fanoutv1.ReplicateResponse{NodeId: s.nodeID, Incarnation: s.incarnation, Statuses: s.okStatuses(w.events)}}
			}
		}
		if m.GetSeq() == 0 {
			if m.GetCode() != 0 { // the receiver is closing the stream
				s.fail(status.Error(codes.Code(m.GetCode()), m.GetMessage()))
				return
			}
			continue
		}
		w, ok := s.take(m.GetSeq())
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

// take removes the batch of seq from the waiters: false if there is none (not a seq
// sent on this stream, or answered already).
func (s *replStream) take(seq uint64) (waiter, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.waiters[seq]
	if ok {
		delete(s.waiters, seq)
		if w.held {
			s.held--
		}
	}
	return w, ok
}

// okStatuses is n times ITEM_STATUS_OK, shared read-only (the reader's goroutine).
func (s *replStream) okStatuses(n int) []fanoutv1.ItemStatus {
	if len(s.ok) < n {
		s.ok = make([]fanoutv1.ItemStatus, max(n, 2*len(s.ok), 64))
		for i := range s.ok {
			s.ok[i] = fanoutv1.ItemStatus_ITEM_STATUS_OK
		}
	}
	return s.ok[:n:n]
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
	s.waiters, s.held = nil, 0
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

// holding reports whether a batch sent with a hold is in flight.
func (s *replStream) holding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held > 0
}

func (s *replStream) broken() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// do sends one batch of events events and waits for its answer. A batch whose ctx
// ends first ends the stream (its other batches are answered with the same error):
// the next batch opens a fresh stream, as the next unary call would start afresh. The
// error is a status error or a context error, unclassified. mayHold: the batch goes
// with a hold unless MaxHeld held batches are in flight already or none went without
// one for promptEvery; held says whether it did.
func (s *replStream) do(ctx context.Context, f *frame.Frame, events int, mayHold bool) (*fanoutv1.ReplicateResponse, bool, error) {
	select {
	case <-s.ready:
	case <-ctx.Done():
		s.fail(ctx.Err()) // an open that outlasts a batch's deadline: start over
		return nil, false, ctx.Err()
	}
	select {
	case <-s.header:
	default:
		if err := s.awaitHeader(ctx); err != nil {
			return nil, false, err
		}
	}
	var now time.Time
	if mayHold {
		now = time.Now()
	}
	ch := make(chan *answer, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, false, err
	}
	s.seq++
	seq := s.seq
	var hold uint32
	if mayHold && s.held < s.conn.maxHeld && now.Sub(s.prompt) < s.conn.promptEvery {
		hold = s.conn.hold
	} else if mayHold {
		s.prompt = now
	}
	size := wire.ReplicateStreamHeadSize(seq, len(f.B)) + len(f.B) + wire.ReplicateStreamHoldSize(hold)
	if limit := s.conn.sendLimit(); int64(size) > limit {
		s.mu.Unlock()
		// As gRPC says it when it refuses to send a message: ErrTooLarge (Classify).
		return nil, false, status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", size, limit)
	}
	held := hold != 0
	if held {
		s.held++
	}
	s.waiters[seq] = waiter{ch: ch, size: size, events: events, held: held}
	s.mu.Unlock()

	select {
	case s.sendSem <- struct{}{}:
	case a := <-ch: // the stream ended while this batch waited to be sent
		return a.resp, held, a.err
	case <-ctx.Done():
		s.fail(ctx.Err())
		return nil, held, ctx.Err()
	}
	err := s.cs.SendMsg(&streamFrame{seq: seq, hold: hold, batch: f.B})
	<-s.sendSem
	if err != nil && !errors.Is(err, io.EOF) {
		s.fail(err) // gRPC ended the stream for an error of this send
	} // io.EOF: the stream has ended; the reader gets its status and answers
	select {
	case a := <-ch:
		return a.resp, held, a.err
	case <-ctx.Done():
		s.fail(ctx.Err())
		return nil, held, ctx.Err()
	}
}

// awaitHeader waits for the receiver's header, up to the conn's headerWait: after
// it the batch goes at this node's own limit (a receiver that says its limit only
// with its first answer, if at all). A batch whose ctx ends first ends the stream,
// as in do.
func (s *replStream) awaitHeader(ctx context.Context) error {
	t := time.NewTimer(s.conn.headerWait)
	defer t.Stop()
	select {
	case <-s.header:
	case <-t.C:
	case <-ctx.Done():
		s.fail(ctx.Err())
		return ctx.Err()
	}
	return nil
}

// streamFrame is a ReplicateStreamRequest whose batch is an encoded ReplicateRequest:
// the codec (a frame.Appender) writes the head and the batch into one pooled buffer.
type streamFrame struct {
	seq   uint64
	hold  uint32 // answer_hold_micros; 0: none
	batch []byte
}

var _ frame.Appender = (*streamFrame)(nil)

// EncodedSize is the size of the request: its head, the batch's bytes, the hold.
func (f *streamFrame) EncodedSize() int {
	return wire.ReplicateStreamHeadSize(f.seq, len(f.batch)) + len(f.batch) + wire.ReplicateStreamHoldSize(f.hold)
}

// AppendEncoded appends the request's head, then the batch's bytes as they are, then
// the hold.
func (f *streamFrame) AppendEncoded(b []byte) []byte {
	b = append(wire.AppendReplicateStreamHead(b, f.seq, len(f.batch)), f.batch...)
	return wire.AppendReplicateStreamHold(b, f.hold)
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
