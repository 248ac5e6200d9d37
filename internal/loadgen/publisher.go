package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/fanout/fanout/bench/loadkit"
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/frame"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/client"
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
	seq int64         // the publisher's sequence number of the first event
	n   int           // events
	due time.Duration // when the request was due on the schedule (= sent when unpaced)
}

// publisher drives one SubmitStream on the first node: its send loop (the caller's
// goroutine) paces and sends requests; its receive goroutine, which run starts and
// waits for, matches each response to its request by request_id. A paced publisher
// is open loop: it sends on the schedule whatever the responses. An unpaced one keeps
// at most cfg.Pipeline requests in flight and, with a window, at most cfg.Window
// events not yet received by every subscriber.
type publisher struct {
	index  int
	cfg    *Config
	client fanoutv1.FanoutServiceClient // --client stream
	app    *client.Client               // --client publisher
	clock  clock
	win    window
	latest keyVersions   // nil without hot keys
	slots  chan struct{} // nil when paced: an open-loop publisher does not wait for responses
	window *loadkit.Window
	lag    *hdrhistogram.Histogram // the pacer's, once send has returned

	// accepted and measured count the events the node accepted, in all and of those
	// sent in the measured window. lastSend is the offset just after the last Send.
	accepted, measured atomic.Uint64
	// notAccepted counts the events the node answered STALE or REFUSED (a full
	// state table): they are not sent, so no subscriber waits for them.
	notAccepted atomic.Uint64
	lastSend    atomic.Int64

	mu       sync.Mutex
	inflight map[uint64]sentRequest // guarded by mu; len <= cfg.Pipeline

	// The send loop's scratch: the request being written, the shared payload and a
	// task_id. The connection's codec (frame.DialOptions) sends a copy of the frame
	// before SendMsg returns, so each is reused.
	req           frame.Frame
	payload, name []byte
}

func newPublisher(index int, cfg *Config, client fanoutv1.FanoutServiceClient, c clock, win window, latest keyVersions, w *loadkit.Window) *publisher {
	p := &publisher{
		index: index, cfg: cfg, client: client, clock: c, win: win, latest: latest, window: w,
		inflight: make(map[uint64]sentRequest, cfg.Pipeline),
	}
	if cfg.Rate <= 0 {
		p.slots = make(chan struct{}, cfg.Pipeline)
	}
	return p
}

// run publishes until the window ends and every response is in, or ctx is done.
func (p *publisher) run(ctx context.Context) error {
	if p.app != nil {
		return p.runPublisher(ctx)
	}
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

// send follows the shared open-loop schedule (loadkit.Pacer): a request is due when
// its last event has been offered at the rate, and goes out then, or at once when the
// publisher is behind, without waiting for responses. With --rate 0 it sends whenever
// a pipeline slot is free and the window (if any) has room. Every event of a request
// carries the request's stamp: the clock read right before Send, and the due time.
func (p *publisher) send(ctx context.Context, stream fanoutv1.FanoutService_SubmitStreamClient) error {
	pacer, wctx, done := p.pace(ctx)
	defer done()
	var seq int64
	for id := uint64(1); ; id++ {
		due, ok, err := pacer.Next(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if !pacer.Paced() {
			if ok, err := p.acquire(ctx, wctx); !ok || err != nil {
				return err
			}
		}
		stamp := pacer.Stamp(due)
		p.request(id, seq, stamp)
		n := p.cfg.Batch
		p.mu.Lock()
		p.inflight[id] = sentRequest{seq: seq, n: n, due: stamp.Due}
		p.mu.Unlock()
		if err := stream.SendMsg(&p.req); err != nil {
			return fmt.Errorf("publisher %d: send: %w", p.index, err)
		}
		pacer.Done(n, stamp)
		p.lastSend.Store(int64(p.clock.since()))
		seq += int64(n)
	}
}

// pace returns the publisher's pacer (the shared open-loop schedule) and the context
// its waits for a slot and the window end with: the publishing time (one context, not
// one per request). done stops the pacer, keeps its lag histogram and ends wctx.
func (p *publisher) pace(ctx context.Context) (pacer *loadkit.Pacer, wctx context.Context, done func()) {
	pacer = loadkit.NewPacer(p.clock.since, publisherRate(p.cfg.Rate, p.cfg.Publishers), p.cfg.Batch, p.win.start, p.win.end)
	wctx, cancel := context.WithTimeout(ctx, p.win.end-p.clock.since())
	return pacer, wctx, func() {
		cancel()
		pacer.Stop()
		p.lag = pacer.Lag()
	}
}

// acquire waits, for an unpaced request, for a pipeline slot and room in the window.
// wctx ends with the publishing time: ok is false when it ended meanwhile.
func (p *publisher) acquire(ctx, wctx context.Context) (ok bool, err error) {
	select {
	case p.slots <- struct{}{}:
	case <-wctx.Done():
		return false, ctx.Err()
	}
	if err := p.window.Acquire(wctx, p.cfg.Batch); err != nil {
		<-p.slots
		return false, ctx.Err()
	}
	return true, nil
}

// request writes into p.req the SubmitRequest id with cfg.Batch events from seq on.
// The events share one payload: its first 16 bytes are the stamp (loadkit.Stamp), the
// rest zeros. It writes the bytes protobuf would (wire.AppendSubmitEvent), without
// building the message: a publisher that allocates per event would take CPU from the
// nodes it measures, which share the machine.
func (p *publisher) request(id uint64, seq int64, stamp loadkit.Stamp) {
	if len(p.payload) != p.cfg.Payload {
		p.payload = make([]byte, p.cfg.Payload)
	}
	stamp.Put(p.payload)
	b := p.req.B[:0]
	for i := range p.cfg.Batch {
		p.name = appendTaskID(p.name[:0], p.cfg.Prefix, p.cfg.Keys, seq+int64(i), p.index, p.cfg.Publishers)
		b = wire.AppendSubmitEvent(b, p.name, p.payload)
	}
	p.req.B = wire.AppendSubmitRequestID(b, id)
}

// receive reads responses until the stream ends. On an error it cancels the stream, so
// that send stops too. It reads each from its bytes (wire.ParseSubmitResponse) into
// one reused Answer.
func (p *publisher) receive(stream fanoutv1.FanoutService_SubmitStreamClient, cancel context.CancelFunc) error {
	var f frame.Frame
	var a wire.Answer
	for {
		err := stream.RecvMsg(&f)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err == nil {
			a = wire.Answer{Versions: a.Versions[:0], Outcomes: a.Outcomes[:0]}
			if err = wire.ParseSubmitResponse(f.B, &a); err != nil {
				err = fmt.Errorf("not a valid fanout.v1.SubmitResponse: %w", err)
			}
		}
		if err == nil {
			err = p.accept(&a)
		}
		if err != nil {
			cancel()
			return fmt.Errorf("publisher %d: SubmitStream: %w", p.index, err)
		}
	}
}

// accept matches a response to its request and counts it.
func (p *publisher) accept(a *wire.Answer) error {
	p.mu.Lock()
	sr, ok := p.inflight[a.RequestID]
	delete(p.inflight, a.RequestID)
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("response to unknown request_id %d", a.RequestID)
	}
	if p.slots != nil {
		<-p.slots
	}
	if len(a.Versions) != sr.n || len(a.Outcomes) > sr.n {
		return fmt.Errorf("request_id %d: %d versions and %d results for %d events", a.RequestID, len(a.Versions), len(a.Outcomes), sr.n)
	}
	n := uint64(sr.n)
	for _, o := range a.Outcomes {
		if o != int32(fanoutv1.EventOutcome_EVENT_OUTCOME_ACCEPTED) {
			n--
		}
	}
	p.notAccepted.Add(uint64(sr.n) - n)
	p.window.Forget(sr.n - int(n)) // never sent to the peers: no subscriber gets them
	p.accepted.Add(n)
	if sr.due >= p.win.measureFrom {
		p.measured.Add(n)
	}
	if p.latest != nil {
		for i, v := range a.Versions {
			p.latest.raise(keyIndex(sr.seq+int64(i), p.index, p.cfg.Publishers, p.cfg.Keys), v)
		}
	}
	return nil
}
