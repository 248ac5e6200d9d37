package batcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitTimeout bounds every wait in the driver tests.
const waitTimeout = 5 * time.Second

// call is one Process call seen by chanProcessor.
type call struct {
	tasks []Task[int] // a copy
	reply chan Result
}

// chanProcessor hands every call to the test and waits for its reply.
type chanProcessor struct{ calls chan call }

func newChanProcessor() *chanProcessor { return &chanProcessor{calls: make(chan call)} }

func (p *chanProcessor) Process(ctx context.Context, batch []Task[int]) Result {
	c := call{tasks: append([]Task[int](nil), batch...), reply: make(chan Result, 1)}
	select {
	case p.calls <- c:
	case <-ctx.Done():
		return Result{Class: NetworkFailure, Err: ctx.Err()}
	}
	select {
	case r := <-c.reply:
		return r
	case <-ctx.Done():
		return Result{Class: NetworkFailure, Err: ctx.Err()}
	}
}

// next waits for the next call.
func (p *chanProcessor) next(t *testing.T) call {
	t.Helper()
	select {
	case c := <-p.calls:
		return c
	case <-time.After(waitTimeout):
		t.Fatal("no Process call")
		return call{}
	}
}

// okResult answers every task of a batch with ItemOK.
func okResult(n int) Result { return Result{Class: Success, Items: make([]ItemOutcome, n)} }

// finalSink collects OnFinal calls from the acceptor.
type finalSink struct {
	mu    sync.Mutex
	fates fateLog
}

func (s *finalSink) record(t *Task[int], f Fate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fates.record(t, f)
}

func (s *finalSink) snapshot() fateLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := fateLog{}
	for k, v := range s.fates {
		out[k] = append([]Fate(nil), v...)
	}
	return out
}

func newTestBatcher(t *testing.T, p Processor[int], mod func(*Config[int])) (*Batcher[int], *finalSink) {
	t.Helper()
	sink := &finalSink{fates: fateLog{}}
	cfg := DefaultConfig[int]()
	cfg.Workers = 2
	cfg.OnFinal = sink.record
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, sink
}

func drain(t *testing.T, b *Batcher[int]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := b.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v (stats %+v)", err, b.Stats())
	}
}

func offer(t *testing.T, b *Batcher[int], tasks ...Task[int]) {
	t.Helper()
	if err := b.Offer(context.Background(), tasks); err != nil {
		t.Fatalf("Offer: %v", err)
	}
}

func TestBatcherEndToEnd(t *testing.T) {
	const n = 1000
	p := ProcessorFunc[int](func(_ context.Context, batch []Task[int]) Result { return okResult(len(batch)) })
	b, sink := newTestBatcher(t, p, func(c *Config[int]) { c.MaxBatch = 7 })
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range n / 4 {
				v := g*n/4 + i
				if err := b.Offer(context.Background(), []Task[int]{tk(fmt.Sprint(v), v)}); err != nil {
					t.Error(err)
				}
				_ = b.Stats() // racing reads
			}
		})
	}
	wg.Wait()
	drain(t, b)
	s := b.Stats()
	if s.Accepted != n || s.Succeeded != n || s.Pending != 0 || s.InFlight != 0 || s.AcceptorQueue != 0 || s.IdleWorkers != 2 {
		t.Errorf("stats = %+v", s)
	}
	fates := sink.snapshot()
	for v := range n {
		if fates.only(v) != FateSucceeded {
			t.Fatalf("task %d: fates %v", v, fates[v])
		}
	}
}

func TestBatcherRetriesAfterCongestion(t *testing.T) {
	p := newChanProcessor()
	b, sink := newTestBatcher(t, p, func(c *Config[int]) { c.Workers, c.CongestionRetryDelay = 1, time.Millisecond })
	offer(t, b, tk("a", 1), tk("b", 2))
	first := p.next(t)
	start := time.Now()
	first.reply <- Result{Class: Congestion}
	second := p.next(t)
	if waited := time.Since(start); waited < time.Millisecond {
		t.Errorf("retried after %v, before the congestion pause", waited)
	}
	if got := taskStrings(second.tasks); strings.Join(got, ",") != "a:1,b:2" {
		t.Errorf("retry batch = %q", got)
	}
	second.reply <- okResult(2)
	drain(t, b)
	s := b.Stats()
	if s.Congestion != 2 || s.Replayed != 2 || s.Succeeded != 2 {
		t.Errorf("stats = %+v", s)
	}
	if f := sink.snapshot(); f.only(1) != FateSucceeded || f.only(2) != FateSucceeded {
		t.Errorf("fates = %v", f)
	}
}

// TestBatcherIdleFlush goes through the real acceptor goroutine: with a window of an
// hour, only the idle-flush wake-up (nextWake's timer) can send the batch, and
// nothing else happens after the Offer to wake the acceptor.
func TestBatcherIdleFlush(t *testing.T) {
	p := newChanProcessor()
	b, sink := newTestBatcher(t, p, func(c *Config[int]) {
		c.Workers, c.MaxBatchingDelay, c.IdleFlush = 1, time.Hour, time.Millisecond
	})
	offer(t, b, tk("a", 1), tk("b", 2), tk("a", 3)) // a:3 coalesces into a's slot
	first := p.next(t)                              // waitTimeout, not an hour
	if got := taskStrings(first.tasks); strings.Join(got, ",") != "a:3,b:2" {
		t.Errorf("first batch = %q, want a:3,b:2", got)
	}
	first.reply <- okResult(2)
	offer(t, b, tk("c", 4)) // the timer is armed again for the next tail
	second := p.next(t)
	if got := taskStrings(second.tasks); strings.Join(got, ",") != "c:4" {
		t.Errorf("second batch = %q, want c:4", got)
	}
	second.reply <- okResult(1)
	drain(t, b)
	f := sink.snapshot()
	if f.only(1) != FateOverridden || f.only(2) != FateSucceeded || f.only(3) != FateSucceeded || f.only(4) != FateSucceeded {
		t.Errorf("fates = %v", f)
	}
}

// TestBatcherNoIdleFlushKeepsTheWindow is the control: without IdleFlush the same
// Offer waits out the window. A send within the short wait is a bug, never a flake.
func TestBatcherNoIdleFlushKeepsTheWindow(t *testing.T) {
	p := newChanProcessor()
	b, _ := newTestBatcher(t, p, func(c *Config[int]) { c.Workers, c.MaxBatchingDelay = 1, time.Hour })
	offer(t, b, tk("a", 1))
	select {
	case c := <-p.calls:
		t.Fatalf("sent %q before the window ended", taskStrings(c.tasks))
	case <-time.After(50 * time.Millisecond):
	}
	if s := b.Stats(); s.Pending != 1 || s.InFlight != 0 {
		t.Errorf("stats = %+v, want a pending", s)
	}
}

func TestBatcherInFlightExclusion(t *testing.T) {
	p := newChanProcessor()
	b, _ := newTestBatcher(t, p, nil) // two workers
	offer(t, b, tk("a", 1))
	first := p.next(t)
	offer(t, b, tk("a", 2), tk("b", 3))
	second := p.next(t)
	if got := taskStrings(second.tasks); strings.Join(got, ",") != "b:3" {
		t.Errorf("second batch = %q, want only b:3 while a is in flight", got)
	}
	second.reply <- okResult(1)
	first.reply <- okResult(1)
	third := p.next(t)
	if got := taskStrings(third.tasks); strings.Join(got, ",") != "a:2" {
		t.Errorf("third batch = %q, want a:2", got)
	}
	third.reply <- okResult(1)
	drain(t, b)
}

// TestBatcherNewer goes through the goroutines with Config.Newer set: the highest
// version wins in one Offer, and a version older than the one in flight is dropped
// instead of parking behind it.
func TestBatcherNewer(t *testing.T) {
	p := newChanProcessor()
	b, sink := newTestBatcher(t, p, func(c *Config[int]) { c.Newer = byValue })
	offer(t, b, tk("a", 10), tk("a", 5))
	first := p.next(t)
	if got := taskStrings(first.tasks); strings.Join(got, ",") != "a:10" {
		t.Errorf("first batch = %q, want a:10", got)
	}
	// 7 loses to the flight and 15 to the parked 20. b goes to the second worker,
	// which shows that this Offer was accepted while a:10 flies.
	offer(t, b, tk("a", 7), tk("a", 20), tk("a", 15), tk("b", 1))
	second := p.next(t)
	if got := taskStrings(second.tasks); strings.Join(got, ",") != "b:1" {
		t.Errorf("second batch = %q, want b:1", got)
	}
	second.reply <- okResult(1)
	first.reply <- okResult(1)
	third := p.next(t)
	if got := taskStrings(third.tasks); strings.Join(got, ",") != "a:20" {
		t.Errorf("third batch = %q, want a:20", got)
	}
	third.reply <- okResult(1)
	drain(t, b)
	f := sink.snapshot()
	for val, want := range map[int]Fate{5: FateOverridden, 7: FateOverridden, 15: FateOverridden,
		10: FateSucceeded, 20: FateSucceeded, 1: FateSucceeded} {
		if f.only(val) != want {
			t.Errorf("fates of %d = %v, want %v", val, f[val], want)
		}
	}
	if s := b.Stats(); s.Accepted != 6 || s.Overridden != 3 || s.Succeeded != 3 {
		t.Errorf("stats = %+v", s)
	}
}

// captureHandler keeps the records logged at Error level.
type captureHandler struct {
	mu     sync.Mutex
	errors []string
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *captureHandler) WithGroup(string) slog.Handler            { return h }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Level >= slog.LevelError {
		h.errors = append(h.errors, r.Message)
	}
	return nil
}

func (h *captureHandler) errorCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.errors)
}

func TestBatcherPanicRecovered(t *testing.T) {
	logs := &captureHandler{}
	p := ProcessorFunc[int](func(_ context.Context, batch []Task[int]) Result {
		if batch[0].ID == "boom" {
			panic("boom")
		}
		return okResult(len(batch))
	})
	b, sink := newTestBatcher(t, p, func(c *Config[int]) { c.Workers, c.Logger = 1, slog.New(logs) })
	offer(t, b, tk("boom", 1))
	drain(t, b)
	offer(t, b, tk("fine", 2)) // the only worker must still be alive
	drain(t, b)
	f := sink.snapshot()
	if f.only(1) != FatePermanent || f.only(2) != FateSucceeded {
		t.Errorf("fates = %v", f)
	}
	if s := b.Stats(); s.Permanent != 1 || s.Succeeded != 1 || s.IdleWorkers != 1 {
		t.Errorf("stats = %+v", s)
	}
	if logs.errorCount() != 1 {
		t.Errorf("logged %d errors, want 1 for the panic", logs.errorCount())
	}
}

func TestBatcherDrain(t *testing.T) {
	p := newChanProcessor()
	b, _ := newTestBatcher(t, p, nil)
	drain(t, b) // empty: at once
	offer(t, b, tk("a", 1))
	c := p.next(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := b.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain with a task in flight = %v, want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		done <- b.Drain(ctx)
	}()
	c.reply <- okResult(1)
	if err := <-done; err != nil {
		t.Errorf("Drain = %v", err)
	}
}

// blockingGate blocks the acceptor in Hold until release is closed.
type blockingGate struct {
	entered chan struct{} // receives once Hold has been entered
	release chan struct{}
}

func (g *blockingGate) Hold(time.Time) time.Duration {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.release
	return 0
}

func TestBatcherOfferBlocksOnFullQueue(t *testing.T) {
	gate := &blockingGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	p := ProcessorFunc[int](func(_ context.Context, batch []Task[int]) Result { return okResult(len(batch)) })
	b, sink := newTestBatcher(t, p, func(c *Config[int]) { c.AcceptorQueue, c.Gate = 1, gate })
	offer(t, b, tk("a", 1))
	<-gate.entered                      // the acceptor is stuck in the gate
	offer(t, b, tk("b", 2), tk("c", 3)) // fills the queue
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := b.Offer(ctx, []Task[int]{tk("d", 4)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Offer on a full queue = %v, want DeadlineExceeded", err)
	}
	if s := b.Stats(); s.AcceptorQueue != 2 {
		t.Errorf("AcceptorQueue = %d, want 2", s.AcceptorQueue)
	}
	blocked := make(chan error, 1)
	go func() { blocked <- b.Offer(context.Background(), []Task[int]{tk("e", 5)}) }()
	close(gate.release)
	if err := <-blocked; err != nil {
		t.Errorf("blocked Offer = %v once the queue had room", err)
	}
	drain(t, b)
	if f := sink.snapshot(); len(f) != 4 || f.only(4) != -1 {
		t.Errorf("fates = %v, want a, b, c, e succeeded", f)
	}
}

func TestBatcherClose(t *testing.T) {
	gate := &fakeGate{until: time.Now().Add(time.Hour)} // holds everything pending
	p := newChanProcessor()
	b, sink := newTestBatcher(t, p, func(c *Config[int]) { c.Gate = gate })
	offer(t, b, tk("a", 1), tk("b", 2), tk("a", 3))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := b.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Drain while the gate holds = %v", err)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(b.Close) // idempotent, also concurrently
	}
	wg.Wait()
	b.Close()
	f := sink.snapshot()
	want := fateLog{1: {FateOverridden}, 2: {FateStopped}, 3: {FateStopped}}
	if fmt.Sprint(f) != fmt.Sprint(want) {
		t.Errorf("fates = %v, want %v", f, want)
	}
	if err := b.Offer(context.Background(), []Task[int]{tk("c", 4)}); !errors.Is(err, ErrStopped) {
		t.Errorf("Offer after Close = %v, want ErrStopped", err)
	}
	if err := b.Offer(context.Background(), nil); !errors.Is(err, ErrStopped) {
		t.Errorf("empty Offer after Close = %v, want ErrStopped", err)
	}
	if err := b.Drain(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("Drain after Close = %v, want ErrStopped", err)
	}
	if s := b.Stats(); s.Accepted != 3 || s.Pending != 0 || s.IdleWorkers != 2 {
		t.Errorf("stats after Close = %+v", s)
	}
}

func TestBatcherCloseWithBatchesInFlight(t *testing.T) {
	p := newChanProcessor()
	b, sink := newTestBatcher(t, p, func(c *Config[int]) { c.MaxBatch = 1 })
	offer(t, b, tk("a", 1), tk("b", 2), tk("c", 3))
	p.next(t) // one worker waits for a reply that never comes
	p.next(t) // and so does the other
	b.Close() // cancels both: NetworkFailure, retried, then stopped
	f := sink.snapshot()
	for v := 1; v <= 3; v++ {
		if f.only(v) != FateStopped {
			t.Errorf("task %d: fates %v, want stopped", v, f[v])
		}
	}
}

func TestBatcherCloseUnblocksOffer(t *testing.T) {
	gate := &blockingGate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	p := ProcessorFunc[int](func(_ context.Context, batch []Task[int]) Result { return okResult(len(batch)) })
	b, sink := newTestBatcher(t, p, func(c *Config[int]) { c.AcceptorQueue, c.Gate = 1, gate })
	offer(t, b, tk("a", 1))
	<-gate.entered
	offer(t, b, tk("b", 2))
	blocked := make(chan error, 1)
	go func() { blocked <- b.Offer(context.Background(), []Task[int]{tk("c", 3)}) }()
	closed := make(chan struct{})
	go func() {
		b.Close()
		close(closed)
	}()
	if err := <-blocked; !errors.Is(err, ErrStopped) {
		t.Errorf("Offer blocked across Close = %v, want ErrStopped", err)
	}
	close(gate.release) // lets the acceptor see the cancel
	<-closed
	if f := sink.snapshot(); f.only(2) != FateStopped || len(f[3]) != 0 {
		t.Errorf("fates = %v, want b stopped and c never accepted", f)
	}
}

func TestBatcherSharedSlice(t *testing.T) {
	p := ProcessorFunc[int](func(_ context.Context, batch []Task[int]) Result { return okResult(len(batch)) })
	b1, _ := newTestBatcher(t, p, nil)
	b2, _ := newTestBatcher(t, p, nil)
	tasks := []Task[int]{tk("a", 1), tk("b", 2), tk("a", 3)}
	want := fmt.Sprint(tasks)
	offer(t, b1, tasks...)
	offer(t, b2, tasks...)
	drain(t, b1)
	drain(t, b2)
	if got := fmt.Sprint(tasks); got != want {
		t.Errorf("offered slice changed: %s, was %s", got, want)
	}
}

func TestNew(t *testing.T) {
	p := ProcessorFunc[int](func(context.Context, []Task[int]) Result { return Result{} })
	for _, tc := range []struct {
		name    string
		mod     func(*Config[int])
		p       Processor[int]
		wantErr string
	}{
		{"defaults", nil, p, ""},
		{"zero Now and Logger get defaults", func(c *Config[int]) { c.Now, c.Logger = nil, nil }, p, ""},
		{"MaxBuffer", func(c *Config[int]) { c.MaxBuffer = 0 }, p, "batcher.Config.MaxBuffer: must be > 0, got 0"},
		{"MaxBatch", func(c *Config[int]) { c.MaxBatch = 0 }, p, "batcher.Config.MaxBatch: must be > 0, got 0"},
		{"MaxBatch over MaxBuffer", func(c *Config[int]) { c.MaxBuffer, c.MaxBatch = 10, 11 }, p,
			"batcher.Config.MaxBatch: must be <= batcher.Config.MaxBuffer (10), got 11"},
		{"Workers", func(c *Config[int]) { c.Workers = -1 }, p, "batcher.Config.Workers: must be > 0, got -1"},
		{"AcceptorQueue", func(c *Config[int]) { c.AcceptorQueue = 0 }, p, "batcher.Config.AcceptorQueue: must be > 0, got 0"},
		{"MaxBatchingDelay", func(c *Config[int]) { c.MaxBatchingDelay = -1 }, p,
			"batcher.Config.MaxBatchingDelay: must be >= 0, got -1ns"},
		{"IdleFlush", func(c *Config[int]) { c.IdleFlush = -time.Millisecond }, p,
			"batcher.Config.IdleFlush: must be >= 0, got -1ms"},
		{"CongestionRetryDelay", func(c *Config[int]) { c.CongestionRetryDelay = -time.Second }, p,
			"batcher.Config.CongestionRetryDelay: must be >= 0, got -1s"},
		{"NetworkFailureRetryDelay", func(c *Config[int]) { c.NetworkFailureRetryDelay = -time.Second }, p,
			"batcher.Config.NetworkFailureRetryDelay: must be >= 0, got -1s"},
		{"nil Processor", nil, nil, "batcher: Processor must not be nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig[int]()
			if tc.mod != nil {
				tc.mod(&cfg)
			}
			b, err := New(cfg, tc.p)
			if b != nil {
				b.Close()
			}
			if got := fmt.Sprint(err); tc.wantErr != "" && got != tc.wantErr || tc.wantErr == "" && err != nil {
				t.Errorf("New = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig[string]()
	if c.MaxBuffer != 10000 || c.MaxBatch != 250 || c.MaxBatchingDelay != 0 || c.IdleFlush != 0 || c.Workers != 8 ||
		c.CongestionRetryDelay != 100*time.Millisecond || c.NetworkFailureRetryDelay != time.Second ||
		c.AcceptorQueue != 1024 || c.Now == nil || c.Logger == nil || c.OnFinal != nil || c.Gate != nil {
		t.Errorf("DefaultConfig = %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Errorf("DefaultConfig does not validate: %v", err)
	}
}

func TestLogEvery(t *testing.T) {
	const every = time.Second
	var e logEvery
	for _, tc := range []struct {
		name      string
		at        time.Duration
		n         int
		wantTotal uint64
		wantOK    bool
	}{
		{"first line goes out", 0, 2, 2, true},
		{"held within the interval", 500 * time.Millisecond, 3, 0, false},
		{"held again", 999 * time.Millisecond, 1, 0, false},
		{"next line reports the held ones", time.Second, 1, 5, true},
		{"clock stepped back lets a line out", 0, 1, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			total, ok := e.add(tc.n, t0.Add(tc.at), every)
			if total != tc.wantTotal || ok != tc.wantOK {
				t.Errorf("add = %d, %v; want %d, %v", total, ok, tc.wantTotal, tc.wantOK)
			}
		})
	}
}

// TestStatsSnapshotsAreConsistent reads Stats while tasks flow and checks, on every
// snapshot, that each accepted task is pending, in flight, waiting for reprocess, or
// has exactly one fate. A snapshot mixing two acceptor steps breaks it.
func TestStatsSnapshotsAreConsistent(t *testing.T) {
	var retried sync.Map // values whose batch already failed once
	p := ProcessorFunc[int](func(_ context.Context, batch []Task[int]) Result {
		if v := batch[0].Value; v%3 == 0 {
			if _, again := retried.LoadOrStore(v, true); !again {
				return Result{Class: Congestion} // once: the reprocess queue and Replayed move
			}
		}
		return okResult(len(batch))
	})
	b, _ := newTestBatcher(t, p, func(c *Config[int]) {
		c.MaxBuffer, c.MaxBatch = 64, 8
		c.CongestionRetryDelay = 0
	})
	stop := make(chan struct{})
	bad := make(chan Stats, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := b.Stats()
			placed := s.Pending + s.InFlight + s.ReprocessQueue
			fated := s.Succeeded + s.Stale + s.Overridden + s.Overflow + s.Expired + s.Permanent
			if s.Accepted != placed+fated {
				select {
				case bad <- s:
				default:
				}
				return
			}
		}
	}()
	for i := range 20000 {
		if err := b.Offer(context.Background(), []Task[int]{{ID: strconv.Itoa(i % 100), Value: i}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	select {
	case s := <-bad:
		t.Fatalf("inconsistent snapshot: accepted %d != pending %d + in flight %d + reprocess %d + fates %d: %+v",
			s.Accepted, s.Pending, s.InFlight, s.ReprocessQueue,
			s.Succeeded+s.Stale+s.Overridden+s.Overflow+s.Expired+s.Permanent, s)
	default:
	}
}
