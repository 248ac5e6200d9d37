package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// clock measures offsets from the run's epoch with the monotonic reading of now. Every
// goroutine of a run shares one; it is immutable.
type clock struct {
	now   func() time.Time
	epoch time.Time
}

func (c clock) since() time.Duration { return c.now().Sub(c.epoch) }

// keyVersions is the latest version of each hot key, as the first node assigned it in
// SubmitResponse.versions. Publishers' receive goroutines raise it; the convergence
// check reads it.
type keyVersions []atomic.Uint64

// raise makes key k's version at least v.
func (kv keyVersions) raise(k int, v uint64) {
	for {
		cur := kv[k].Load()
		if v <= cur || kv[k].CompareAndSwap(cur, v) {
			return
		}
	}
}

// window is the part of the schedule a publisher sends in, as offsets from the epoch.
// Events stamped before measureFrom are warmup.
type window struct {
	start, measureFrom, end time.Duration
}

// sentRequest is what a publisher remembers of a request until its response.
type sentRequest struct {
	seq   int64         // the publisher's sequence number of the first event
	n     int           // events
	stamp time.Duration // the send time written into the payloads
}

// publisher drives one SubmitStream on the first node: its send loop (the caller's
// goroutine) paces and sends requests, keeping at most cfg.Pipeline in flight; its
// receive goroutine, which run starts and waits for, matches each response to its
// request by request_id.
type publisher struct {
	index  int
	cfg    *Config
	client fanoutv1.FanoutServiceClient
	clock  clock
	win    window
	latest keyVersions // nil without hot keys
	slots  chan struct{}

	// accepted and measured count the events the node accepted, in all and of those
	// sent in the measured window. lastSend is the offset just after the last Send.
	accepted, measured atomic.Uint64
	// notAccepted counts the events the node answered STALE or REFUSED (a full
	// state table): they are not sent, so no subscriber waits for them.
	notAccepted atomic.Uint64
	lastSend    atomic.Int64

	mu       sync.Mutex
	inflight map[uint64]sentRequest // guarded by mu; len <= cfg.Pipeline
}

func newPublisher(index int, cfg *Config, client fanoutv1.FanoutServiceClient, c clock, win window, latest keyVersions) *publisher {
	return &publisher{
		index: index, cfg: cfg, client: client, clock: c, win: win, latest: latest,
		slots:    make(chan struct{}, cfg.Pipeline),
		inflight: make(map[uint64]sentRequest, cfg.Pipeline),
	}
}

// run publishes until the window ends and every response is in, or ctx is done.
func (p *publisher) run(ctx context.Context) error {
	ctx, cancel := withoutDeadline(ctx)
	defer cancel()
	stream, err := p.client.SubmitStream(ctx)
	if err != nil {
		return fmt.Errorf("publisher %d: SubmitStream: %w", p.index, err)
	}
	recvErr := make(chan error, 1)
	go func() { recvErr <- p.receive(stream, cancel) }()
	err = p.send(ctx, stream)
	if err == nil {
		err = stream.CloseSend()
	}
	if err != nil {
		cancel()
	}
	if rerr := <-recvErr; rerr != nil {
		return rerr // the cause; Send only reports io.EOF for a broken stream
	}
	return err
}

// send is the open-loop schedule: request k is sent at dueAt, or at once when the
// schedule is behind. With --rate 0 it sends whenever a pipeline slot is free.
func (p *publisher) send(ctx context.Context, stream fanoutv1.FanoutService_SubmitStreamClient) error {
	rate := publisherRate(p.cfg.Rate, p.cfg.Publishers)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var seq int64
	for id := uint64(1); ; id++ {
		due := p.win.start + dueAt(seq, p.cfg.Batch, rate)
		if rate > 0 && due >= p.win.end || rate <= 0 && p.clock.since() >= p.win.end {
			return nil
		}
		if err := p.sleepUntil(ctx, timer, due); err != nil {
			return err
		}
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		stamp := due // the intended time: a late send shows as latency (no coordinated omission)
		if rate <= 0 {
			stamp = p.clock.since()
		}
		req := p.request(id, seq, stamp)
		p.mu.Lock()
		p.inflight[id] = sentRequest{seq: seq, n: len(req.Events), stamp: stamp}
		p.mu.Unlock()
		if err := stream.Send(req); err != nil {
			return fmt.Errorf("publisher %d: send: %w", p.index, err)
		}
		p.lastSend.Store(int64(p.clock.since()))
		seq += int64(len(req.Events))
	}
}

func (p *publisher) sleepUntil(ctx context.Context, timer *time.Timer, due time.Duration) error {
	d := due - p.clock.since()
	if d <= 0 {
		return nil
	}
	timer.Reset(d)
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// request builds request id with cfg.Batch events from seq on. The events share one
// payload: its first 8 bytes are the stamp, the rest zeros.
func (p *publisher) request(id uint64, seq int64, stamp time.Duration) *fanoutv1.SubmitRequest {
	payload := make([]byte, p.cfg.Payload)
	putStamp(payload, stamp)
	events := make([]*fanoutv1.Event, p.cfg.Batch)
	for i := range events {
		events[i] = &fanoutv1.Event{
			TaskId:  taskID(p.cfg.Prefix, p.cfg.Keys, seq+int64(i), p.index, p.cfg.Publishers),
			Payload: payload,
		}
	}
	return &fanoutv1.SubmitRequest{RequestId: id, Events: events}
}

// receive reads responses until the stream ends. On an error it cancels the stream, so
// that send stops too.
func (p *publisher) receive(stream fanoutv1.FanoutService_SubmitStreamClient, cancel context.CancelFunc) error {
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err == nil {
			err = p.accept(resp)
		}
		if err != nil {
			cancel()
			return fmt.Errorf("publisher %d: SubmitStream: %w", p.index, err)
		}
	}
}

// accept matches a response to its request and counts it.
func (p *publisher) accept(resp *fanoutv1.SubmitResponse) error {
	p.mu.Lock()
	sr, ok := p.inflight[resp.GetRequestId()]
	delete(p.inflight, resp.GetRequestId())
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("response to unknown request_id %d", resp.GetRequestId())
	}
	<-p.slots
	if len(resp.GetVersions()) != sr.n {
		return fmt.Errorf("request_id %d: %d versions for %d events", resp.GetRequestId(), len(resp.GetVersions()), sr.n)
	}
	n := uint64(sr.n)
	for _, r := range resp.GetResults() {
		if r.GetOutcome() != fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED {
			n--
		}
	}
	p.notAccepted.Add(uint64(sr.n) - n)
	p.accepted.Add(n)
	if sr.stamp >= p.win.measureFrom {
		p.measured.Add(n)
	}
	if p.latest != nil {
		for i, v := range resp.GetVersions() {
			p.latest.raise(keyIndex(sr.seq+int64(i), p.index, p.cfg.Publishers, p.cfg.Keys), v)
		}
	}
	return nil
}
