package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The sidecar's limits a Publisher batches up to (docs/API.md): events per request,
// and --max-request-bytes (16 MiB by default).
const (
	maxRequestEvents = 10000
	// DefaultMaxBatchBytes keeps a request well under the sidecar's default
	// --max-request-bytes (16 MiB).
	DefaultMaxBatchBytes = 4 << 20
	// DefaultMaxEventBytes is the sidecar's default --max-event-bytes (a payload).
	DefaultMaxEventBytes = 1 << 20
	// DefaultAnswerHold is PublisherConfig.AnswerHold's default: at a thousand Puts a
	// second, two per answer; a Pending resolves at most 2 ms late.
	DefaultAnswerHold = 2 * time.Millisecond
	maxAnswerHold     = 100 * time.Millisecond
)

// PublisherConfig configures a Publisher. Zero fields take their defaults.
type PublisherConfig struct {
	// MaxBytes bounds the events (encoded) queued and in flight: a Put that would go
	// over waits until earlier ones are answered, or its ctx ends. Default 64 MiB;
	// at least one event (MaxEventBytes and its key).
	MaxBytes int
	// MaxBatchEvents bounds the events of one request (default and at most 10000,
	// the sidecar's limit).
	MaxBatchEvents int
	// MaxBatchBytes bounds one request's encoded size (default 4 MiB). Keep it under
	// the sidecar's --max-request-bytes.
	MaxBatchBytes int
	// MaxEventBytes is the largest payload Put takes (default 1 MiB, the sidecar's
	// --max-event-bytes): a bigger one fails at once, instead of failing its batch.
	MaxEventBytes int
	// MaxInFlight bounds the requests sent and not yet answered (default 8). While
	// they are in flight the next Puts gather into the next batch.
	MaxInFlight int
	// AnswerHold lets the sidecar hold a request's answer up to this long and send it
	// with later ones (answer_hold_micros, API v1.3): a trickle of Puts then costs one
	// answer per run of requests instead of one each, and each Pending resolves up to
	// this much later. Never on the request that fills MaxInFlight, whose answer
	// brings the held ones back at once. Default 2ms; negative: off (answers are then
	// held only while more Puts are queued, window_answers). At most 100ms. Ignored
	// for requests that wait for acks (ONE, QUORUM, ALL), which are answered alone.
	AnswerHold time.Duration
	// Ack and AckTimeout apply to every request (per-Put WithAck and WithAckTimeout
	// are ignored: a batch has one policy). Default Queued, the sidecar's timeout.
	Ack        AckPolicy
	AckTimeout time.Duration
}

// Pending is the result of one Publisher.Put, once the sidecar has answered.
type Pending struct {
	p    *Publisher
	key  string
	ev   *fanoutv1.Event
	size int
	done chan struct{}
	res  Result
	err  error
}

// Done is closed once the result is known.
func (f *Pending) Done() <-chan struct{} { return f.done }

// Wait waits for the result, or for ctx (ctx's error; the event may still be sent).
// The error is as Client.Put's: nil if the event was accepted and its batch's ack
// policy met; a *ResultError; an *Error of the stream (the event's fate is then
// unknown: it may have been applied); or ErrClosed.
func (f *Pending) Wait(ctx context.Context) (Result, error) {
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

func (f *Pending) resolve(r Result, err error) {
	f.res, f.err = r, err
	f.ev = nil // a Pending the caller keeps does not hold the payload
	close(f.done)
	f.p.mu.Lock()
	delete(f.p.unresolved, f)
	f.p.mu.Unlock()
}

// Publisher pipelines and batches concurrent puts onto one SubmitStream. Put queues
// an event and returns at once with its Pending result; a sender goroutine packs what
// is queued into requests (up to the sidecar's limits) while earlier ones are in
// flight, so a load of one event per Put from many goroutines goes out in few
// requests. Memory is bounded by MaxBytes. Safe for concurrent use.
//
// A stream that breaks fails the events in flight on it (their *Error says why: they
// may or may not have been applied); the next batch opens a new stream. A request the
// sidecar refuses whole (INVALID_ARGUMENT, which ends the stream: an event with a
// version past its bounds, say) fails no innocent event: each event that was in
// flight is submitted again alone, and only the bad one fails (ErrInvalid).
type Publisher struct {
	c   *Client
	cfg PublisherConfig

	ctx    context.Context // the streams'; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{} // the sender: something to do

	mu     sync.Mutex
	closed bool
	used   int           // bytes queued and in flight
	space  chan struct{} // closed when bytes are freed
	queue  []*Pending
	// unresolved holds every Pending not yet resolved (queued, in flight, or being
	// failed or sent again alone after its stream ended), for Flush.
	unresolved map[*Pending]struct{}
	cur        *pubStream
	nextID     uint64
	flight     int // requests in flight, on every stream

	requests, events, streams, answers atomic.Uint64
}

// PublisherStats counts what a Publisher sent.
type PublisherStats struct {
	// Requests and Events count the SubmitRequests sent and the events in them
	// (Events/Requests is the mean batch); Streams the SubmitStreams opened;
	// Answers the SubmitResponses received (fewer than Requests when the sidecar
	// answered windows of requests in one message).
	Requests, Events, Streams, Answers uint64
}

// Stats returns the publisher's counters.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{Requests: p.requests.Load(), Events: p.events.Load(), Streams: p.streams.Load(), Answers: p.answers.Load()}
}

// pubStream is one SubmitStream and its requests in flight.
type pubStream struct {
	s        grpc.BidiStreamingClient[fanoutv1.SubmitRequest, fanoutv1.SubmitResponse]
	inflight map[uint64][]*Pending
	dead     bool
}

// NewPublisher starts a publisher on c. Close it to stop its goroutines.
func NewPublisher(c *Client, cfg PublisherConfig) (*Publisher, error) {
	if cfg.MaxEventBytes == 0 {
		cfg.MaxEventBytes = DefaultMaxEventBytes
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 64 << 20
	}
	if cfg.MaxBatchEvents == 0 {
		cfg.MaxBatchEvents = maxRequestEvents
	}
	if cfg.MaxBatchBytes == 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 8
	}
	if cfg.AnswerHold == 0 {
		cfg.AnswerHold = DefaultAnswerHold
	}
	switch {
	case cfg.MaxEventBytes < 0:
		return nil, fmt.Errorf("client: PublisherConfig.MaxEventBytes %d: negative", cfg.MaxEventBytes)
	case cfg.MaxBatchEvents < 0 || cfg.MaxBatchEvents > maxRequestEvents:
		return nil, fmt.Errorf("client: PublisherConfig.MaxBatchEvents %d: want 1 to %d (the sidecar's limit per request)", cfg.MaxBatchEvents, maxRequestEvents)
	case cfg.MaxBatchBytes < cfg.MaxEventBytes+2048:
		return nil, fmt.Errorf("client: PublisherConfig.MaxBatchBytes %d: below one event of MaxEventBytes %d and its key; raise it (keep it under the sidecar's --max-request-bytes)", cfg.MaxBatchBytes, cfg.MaxEventBytes)
	case cfg.MaxBytes < cfg.MaxBatchBytes:
		return nil, fmt.Errorf("client: PublisherConfig.MaxBytes %d: below MaxBatchBytes %d; raise it", cfg.MaxBytes, cfg.MaxBatchBytes)
	case cfg.MaxInFlight < 0:
		return nil, fmt.Errorf("client: PublisherConfig.MaxInFlight %d: negative", cfg.MaxInFlight)
	case cfg.AnswerHold > maxAnswerHold:
		return nil, fmt.Errorf("client: PublisherConfig.AnswerHold %s: at most %s (the sidecar holds no answer longer); negative turns it off", cfg.AnswerHold, maxAnswerHold)
	case cfg.AckTimeout < 0:
		return nil, fmt.Errorf("client: PublisherConfig.AckTimeout %s: negative", cfg.AckTimeout)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{c: c, cfg: cfg, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), space: make(chan struct{}),
		unresolved: make(map[*Pending]struct{})}
	p.wg.Add(1)
	go p.send()
	return p, nil
}

// Put queues key = value and returns at once with its Pending result. It blocks only
// while MaxBytes are queued and in flight, until earlier events are answered or ctx
// ends (ctx's error, nothing queued). Per-event options: WithVersion, WithTTL,
// WithAttributes. A key or payload the sidecar would refuse fails at once (ErrInvalid),
// so that it never fails the batch it would go in. value (and the attributes) are not
// copied: leave them unchanged until the Pending is done.
func (p *Publisher) Put(ctx context.Context, key string, value []byte, opts ...PutOption) (*Pending, error) {
	return p.put(ctx, "publish", key, value, false, opts)
}

// Delete queues the deletion of key, as Put.
func (p *Publisher) Delete(ctx context.Context, key string, opts ...PutOption) (*Pending, error) {
	return p.put(ctx, "publish delete", key, nil, true, opts)
}

func (p *Publisher) put(ctx context.Context, op, key string, value []byte, deleted bool, opts []PutOption) (*Pending, error) {
	if err := validKey(key); err != nil {
		return nil, &Error{Op: op, Key: key, Code: codeInvalid, Msg: err.Error()}
	}
	if len(value) > p.cfg.MaxEventBytes {
		return nil, &Error{Op: op, Key: key, Code: codeInvalid, Msg: fmt.Sprintf("value: %d bytes, at most %d (PublisherConfig.MaxEventBytes, the sidecar's --max-event-bytes)", len(value), p.cfg.MaxEventBytes)}
	}
	o := collect(opts)
	ev := o.event(key, value, deleted)
	f := &Pending{p: p, key: key, ev: ev, size: proto.Size(ev) + 8, done: make(chan struct{})}
	p.mu.Lock()
	for !p.closed && p.used > 0 && p.used+f.size > p.cfg.MaxBytes {
		space := p.space
		p.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		p.mu.Lock()
	}
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	p.used += f.size
	p.queue = append(p.queue, f)
	p.unresolved[f] = struct{}{}
	p.mu.Unlock()
	p.poke()
	return f, nil
}

func (p *Publisher) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Flush waits until every event Put before the call is answered, or ctx ends.
func (p *Publisher) Flush(ctx context.Context) error {
	p.mu.Lock()
	wait := make([]*Pending, 0, len(p.unresolved))
	for f := range p.unresolved {
		wait = append(wait, f)
	}
	p.mu.Unlock()
	for _, f := range wait {
		select {
		case <-f.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close stops the publisher: later Puts fail with ErrClosed, and so do the events
// still queued or in flight (Flush first to wait for them). It waits for its
// goroutines.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.space)
	p.mu.Unlock()
	p.cancel()
	p.poke()
	p.wg.Wait()
	p.mu.Lock()
	queue := p.queue
	p.queue = nil
	p.mu.Unlock()
	for _, f := range queue {
		f.resolve(Result{}, ErrClosed)
	}
	return nil
}

// send is the sender goroutine: it packs the queue into requests while fewer than
// MaxInFlight are in flight.
func (p *Publisher) send() {
	defer p.wg.Done()
	for {
		select {
		case <-p.wake:
		case <-p.ctx.Done():
			return
		}
		for p.sendOne() {
		}
	}
}

// sendOne sends the next batch, if there is one and room in flight for it. It
// reports whether it took a batch.
func (p *Publisher) sendOne() bool {
	p.mu.Lock()
	if p.ctx.Err() != nil || len(p.queue) == 0 || p.flight >= p.cfg.MaxInFlight {
		p.mu.Unlock()
		return false
	}
	batch := p.take()
	p.mu.Unlock()
	for {
		st, err := p.stream()
		if err != nil {
			err = wrap("publish", "", err)
			if p.ctx.Err() != nil {
				err = ErrClosed
			}
			p.mu.Lock()
			p.freeLocked(batch)
			p.mu.Unlock()
			fail(batch, err)
			return true
		}
		p.mu.Lock()
		if st.dead {
			p.mu.Unlock()
			continue // broke meanwhile: its receiver has failed what it had; open another
		}
		p.nextID++
		id := p.nextID
		st.inflight[id] = batch
		p.flight++
		req := p.request(id, batch)
		// More events queued, and room to send them now: the next request follows at
		// once (this goroutine's next sendOne), so this one's answer may wait for it
		// and share its message (API v1.2; an older sidecar ignores the flag). Never
		// on the last request there is: the sidecar would hold its answer until
		// another request came.
		req.WindowAnswers = len(p.queue) > 0 && p.flight < p.cfg.MaxInFlight
		// With a hold, the sidecar sends what it holds by itself after it: any request
		// but the one that fills MaxInFlight may be held (that one brings the others).
		if p.cfg.AnswerHold > 0 && p.flight < p.cfg.MaxInFlight {
			req.AnswerHoldMicros = uint32(p.cfg.AnswerHold.Microseconds())
		}
		p.mu.Unlock()
		// An error means the stream broke: its receiver's Recv fails too, and fails
		// what was in flight on it, this batch included.
		p.requests.Add(1)
		p.events.Add(uint64(len(batch)))
		_ = st.s.Send(req)
		return true
	}
}

// take removes the next batch from the queue: as many events as fit the limits, at
// least one. p.mu is held.
func (p *Publisher) take() []*Pending {
	n, bytes := 0, 0
	for n < len(p.queue) && n < p.cfg.MaxBatchEvents {
		if n > 0 && bytes+p.queue[n].size > p.cfg.MaxBatchBytes {
			break
		}
		bytes += p.queue[n].size
		n++
	}
	batch := make([]*Pending, n)
	copy(batch, p.queue[:n])
	clear(p.queue[:n])
	p.queue = p.queue[n:]
	return batch
}

func (p *Publisher) request(id uint64, batch []*Pending) *fanoutv1.SubmitRequest {
	req := &fanoutv1.SubmitRequest{RequestId: id, Ack: fanoutv1.AckPolicy(p.cfg.Ack), Events: make([]*fanoutv1.Event, len(batch))}
	for i, f := range batch {
		req.Events[i] = f.ev
	}
	if p.cfg.AckTimeout > 0 {
		req.AckTimeout = durationpb.New(p.cfg.AckTimeout)
	}
	return req
}

// stream returns the current stream, opening one (and its receiver) if there is
// none. Only the sender calls it.
func (p *Publisher) stream() (*pubStream, error) {
	p.mu.Lock()
	cur := p.cur
	p.mu.Unlock()
	if cur != nil && !cur.isDead(&p.mu) {
		return cur, nil
	}
	s, err := p.c.api.SubmitStream(p.ctx)
	if err != nil {
		return nil, err
	}
	p.streams.Add(1)
	st := &pubStream{s: s, inflight: make(map[uint64][]*Pending)}
	p.mu.Lock()
	p.cur = st
	p.mu.Unlock()
	p.wg.Add(1)
	go p.receive(st)
	return st, nil
}

func (st *pubStream) isDead(mu *sync.Mutex) bool {
	mu.Lock()
	defer mu.Unlock()
	return st.dead
}

// receive is a stream's receiver goroutine: it resolves each answered batch, and
// fails what is in flight when the stream ends.
func (p *Publisher) receive(st *pubStream) {
	defer p.wg.Done()
	for {
		resp, err := st.s.Recv()
		if err != nil {
			p.mu.Lock()
			st.dead = true
			var lost []*Pending
			for id, b := range st.inflight {
				lost = append(lost, b...)
				delete(st.inflight, id)
				p.flight--
			}
			closed := p.closed
			p.mu.Unlock()
			switch {
			case closed:
				err = ErrClosed
			case errors.Is(err, io.EOF):
				err = &Error{Op: "publish", Code: codes.Unavailable, Msg: "the sidecar ended the stream"}
			case status.Code(err) == codes.InvalidArgument:
				// One request was refused whole, and the stream with it: one event the
				// client cannot check (a version past the sidecar's bounds, say). Each
				// event in flight goes again alone, so that only the bad one fails.
				p.alone(lost)
				lost = nil
			default:
				err = wrap("publish", "", err)
			}
			p.mu.Lock()
			p.freeLocked(lost)
			p.mu.Unlock()
			fail(lost, err)
			p.poke()
			return
		}
		p.answers.Add(1)
		// One answer covers the requests of request_ids (a window, API v1.2), their
		// results concatenated in that order; or request_id alone.
		ids := resp.GetRequestIds()
		if len(ids) == 0 {
			ids = []uint64{resp.GetRequestId()}
		}
		batches := make([][]*Pending, 0, len(ids))
		p.mu.Lock()
		for _, id := range ids {
			if b, ok := st.inflight[id]; ok {
				delete(st.inflight, id)
				p.flight--
				p.freeLocked(b)
				batches = append(batches, b)
			} else {
				batches = append(batches, nil) // not ours: its results are skipped
			}
		}
		p.mu.Unlock()
		p.poke()
		rs := results(resp)
		n := 0
		for _, b := range batches {
			n += len(b)
		}
		if len(rs) != n {
			for _, b := range batches {
				fail(b, &Error{Op: "publish", Code: codeInternal, Msg: fmt.Sprintf("the sidecar answered %d results for %d events of %d requests", len(rs), n, len(ids))})
			}
			continue
		}
		i := 0
		for _, b := range batches {
			for _, f := range b {
				f.resolve(rs[i], rs[i].err("publish", f.key))
				i++
			}
		}
	}
}

// alone submits each event of lost by itself (unary Submit) and resolves it, then
// frees their bytes. An event that was applied before the stream ended is applied
// again: with the sidecar's versions, as a newer version of the same value; with its
// own version, it is answered STALE.
func (p *Publisher) alone(lost []*Pending) {
	for _, f := range lost {
		req := p.request(0, []*Pending{f})
		req.RequestId = 0
		resp, err := p.c.api.Submit(p.ctx, req)
		switch {
		case p.ctx.Err() != nil:
			f.resolve(Result{}, ErrClosed)
		case err != nil:
			f.resolve(Result{}, wrap("publish", f.key, err))
		default:
			rs := results(resp)
			if len(rs) != 1 {
				f.resolve(Result{}, &Error{Op: "publish", Key: f.key, Code: codeInternal, Msg: fmt.Sprintf("the sidecar answered %d results for 1 event", len(rs))})
				continue
			}
			f.resolve(rs[0], rs[0].err("publish", f.key))
		}
	}
	p.mu.Lock()
	p.freeLocked(lost)
	p.mu.Unlock()
}

// freeLocked gives the bytes of batch back and wakes the Puts waiting for room.
// p.mu is held.
func (p *Publisher) freeLocked(batch []*Pending) {
	if len(batch) == 0 {
		return
	}
	for _, f := range batch {
		p.used -= f.size
	}
	if !p.closed {
		close(p.space)
		p.space = make(chan struct{})
	}
}

func fail(batch []*Pending, err error) {
	for _, f := range batch {
		f.resolve(Result{}, err)
	}
}
