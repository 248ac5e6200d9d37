package batcher

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Batcher is one peer's acceptor/worker batcher. Its methods are safe for
// concurrent use. See the package documentation for the life of a task.
type Batcher[T any] struct {
	cfg  Config[T] // copied and validated by New; read-only
	proc Processor[T]

	// acceptc carries one Offer's tasks per send. workc and donec have room for one
	// batch per worker and the acceptor hands out a batch only to an idle worker, so
	// neither the acceptor nor a worker ever blocks on them.
	acceptc chan []Task[T]
	workc   chan *batch[T]
	donec   chan *batch[T]
	drainc  chan chan struct{} // Drain's waiters, closed by the acceptor when empty

	ctx    context.Context    // cancelled by Close; workers pass it to Process
	cancel context.CancelFunc // called once, by Close
	wg     sync.WaitGroup     // the acceptor and the workers

	// mu guards closed, so that no Offer sends once Close has taken what is left in
	// acceptc. Offer holds it for reading.
	mu     sync.RWMutex
	closed bool

	closeOnce sync.Once
	queued    atomic.Int64 // tasks of Offer calls not yet taken by the acceptor
	stats     statCells    // published by the acceptor after each step

	c *core[T] // owned by the acceptor goroutine; by Close once it has exited
}

// New validates cfg, copies it and starts the acceptor and Config.Workers workers.
// Close stops them.
func New[T any](cfg Config[T], p Processor[T]) (*Batcher[T], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("batcher: Processor must not be nil")
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Batcher[T]{
		cfg:     cfg,
		proc:    p,
		acceptc: make(chan []Task[T], cfg.AcceptorQueue),
		workc:   make(chan *batch[T], cfg.Workers),
		donec:   make(chan *batch[T], cfg.Workers),
		drainc:  make(chan chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
		c:       newCore(&cfg),
	}
	b.publish()
	b.wg.Add(1 + cfg.Workers)
	go b.runAcceptor()
	for range cfg.Workers {
		go b.runWorker()
	}
	return b, nil
}

// Offer hands tasks to the acceptor queue with one channel send, blocking while the
// queue is full. It returns ctx.Err() if ctx ends first and ErrStopped once Close
// has been called. The batcher only reads tasks, and keeps reading it after Offer
// returns, so the caller must not modify it; one slice may be offered to several
// batchers.
func (b *Batcher[T]) Offer(ctx context.Context, tasks []Task[T]) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrStopped
	}
	if len(tasks) == 0 {
		return nil
	}
	n := int64(len(tasks))
	b.queued.Add(n)
	select {
	case b.acceptc <- tasks:
		return nil
	case <-ctx.Done():
		b.queued.Add(-n)
		return ctx.Err()
	case <-b.ctx.Done():
		b.queued.Add(-n)
		return ErrStopped
	}
}

// Stats returns the counters and gauges. It is safe from any goroutine; the
// acceptor publishes them after each step, so they lag by at most one step.
func (b *Batcher[T]) Stats() Stats {
	s := b.stats.load()
	s.AcceptorQueue = uint64(max(b.queued.Load(), 0))
	return s
}

// Drain waits until the acceptor queue, the reprocess queue, pending and in flight
// are all empty. It returns ctx.Err() if ctx ends first and ErrStopped if the
// batcher is closed first. Tasks offered meanwhile extend the wait.
func (b *Batcher[T]) Drain(ctx context.Context) error {
	w := make(chan struct{})
	select {
	case b.drainc <- w:
	case <-ctx.Done():
		return ctx.Err()
	case <-b.ctx.Done():
		return ErrStopped
	}
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.ctx.Done():
		return ErrStopped
	}
}

// Close stops the acceptor and the workers and waits for them. Processor calls in
// progress see their context cancelled; their results still count. Every task
// still queued or pending ends with FateStopped. Close is idempotent.
func (b *Batcher[T]) Close() {
	b.closeOnce.Do(func() {
		b.cancel()
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()
		b.wg.Wait()
		b.finish(b.cfg.Now())
		if b.c.budget != nil {
			b.c.budget.close(b.c.acct) // stopAll left it holding nothing
		}
	})
}

// finish ends what the stopped goroutines left behind. It runs once, after wg.Wait.
func (b *Batcher[T]) finish(now time.Time) {
	for len(b.donec) > 0 {
		b.c.complete(<-b.donec, now)
	}
	for len(b.workc) > 0 {
		b.c.abort(<-b.workc)
	}
	for len(b.acceptc) > 0 {
		tasks := <-b.acceptc
		b.queued.Add(-int64(len(tasks)))
		b.c.stopTasks(tasks)
	}
	b.c.stopAll()
	b.publish()
}

// runAcceptor is the acceptor goroutine, the only one that touches the core. Each
// round waits for one event, then runs one step.
func (b *Batcher[T]) runAcceptor() {
	defer b.wg.Done()
	var (
		w       wake
		waiters []chan struct{}
		shedc   <-chan struct{} // the budget asks for a step (nil without one)
	)
	if b.c.acct != nil {
		shedc = b.c.acct.wake
	}
	defer w.stop()
	for {
		var offered []Task[T]
		var done *batch[T]
		select {
		case offered = <-b.acceptc:
			b.queued.Add(-int64(len(offered)))
		case done = <-b.donec:
		case ch := <-b.drainc:
			waiters = append(waiters, ch)
		case <-w.c:
			w.c = nil
		case <-shedc: // the step sheds
		case <-b.ctx.Done():
			return
		}
		now := b.cfg.Now()
		if done != nil {
			b.c.complete(done, now)
		}
		b.step(offered, now)
		waiters = b.notifyDrained(waiters)
		w.set(b.c.nextWake(now))
	}
}

// step runs the acceptor's steps in order: retries, new offers (the one received and
// whatever else is queued), the budget's rule (shed), then batches for the idle
// workers.
func (b *Batcher[T]) step(offered []Task[T], now time.Time) {
	b.c.drainReprocess(now)
	if offered != nil {
		b.c.accept(offered, now)
	}
	b.drainAcceptQueue(now)
	b.c.shed(now)
	for {
		bt, ok := b.c.assign(now)
		if !ok {
			break
		}
		b.workc <- bt // never blocks: the core assigns only to idle workers
	}
	b.publish()
}

// drainAcceptQueue accepts the offers already queued, at most one queue's worth so
// that a flood cannot hold back completions.
func (b *Batcher[T]) drainAcceptQueue(now time.Time) {
	for range cap(b.acceptc) {
		select {
		case tasks := <-b.acceptc:
			b.queued.Add(-int64(len(tasks)))
			b.c.accept(tasks, now)
		default:
			return
		}
	}
}

// notifyDrained wakes the Drain waiters once everything is empty.
func (b *Batcher[T]) notifyDrained(waiters []chan struct{}) []chan struct{} {
	if len(waiters) == 0 || !b.c.empty() || b.queued.Load() > 0 {
		return waiters
	}
	for i, ch := range waiters {
		close(ch)
		waiters[i] = nil
	}
	return waiters[:0]
}

// runWorker is one worker goroutine: it sends the batches the acceptor hands it,
// and never dies.
func (b *Batcher[T]) runWorker() {
	defer b.wg.Done()
	for {
		select {
		case bt := <-b.workc:
			if b.ctx.Err() != nil {
				b.workc <- bt // never blocks: bt just left it; Close ends it as stopped
				return
			}
			bt.result = b.process(bt.tasks)
			b.donec <- bt // never blocks: donec has room for every assigned batch
		case <-b.ctx.Done():
			return
		}
	}
}

// process calls the Processor, turning a panic into a Permanent result.
func (b *Batcher[T]) process(tasks []Task[T]) (r Result) {
	defer func() {
		if v := recover(); v != nil {
			r = Result{Class: Permanent, Err: &panicError{value: v, stack: debug.Stack()}}
		}
	}()
	return b.proc.Process(b.ctx, tasks)
}

// publish makes the core's counters and gauges visible to Stats.
func (b *Batcher[T]) publish() { b.stats.store(b.c.stats()) }

// panicError is the Result.Err of a batch whose Process panicked.
type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string {
	return fmt.Sprintf("batcher: Process panicked: %v\n%s", e.value, e.stack)
}

// wake is the acceptor's one timer. c is nil while it is disarmed, which turns its
// select case off (raft node.go's propc = nil).
type wake struct {
	t *time.Timer
	c <-chan time.Time
}

// set arms the timer for d, or disarms it if ok is false.
func (w *wake) set(d time.Duration, ok bool) {
	if !ok {
		w.stop()
		return
	}
	if w.t == nil {
		w.t = time.NewTimer(d)
	} else {
		w.t.Reset(d) // no stale fire can follow: Go 1.23 timers
	}
	w.c = w.t.C
}

// stop disarms the timer.
func (w *wake) stop() {
	if w.t != nil {
		w.t.Stop()
	}
	w.c = nil
}

// statCells hold the published Stats. The one writer at a time (New, then the acceptor
// after each step, then finish once it has stopped) stores them; Stats loads them from
// any goroutine. The mutex keeps a snapshot consistent: without it a reader could pair
// this step's Accepted with the last step's Pending. The store is a 120-byte copy, and
// readers are rare (a scrape, GetStatus), so the acceptor almost never waits. A seqlock
// over one atomic per field cost the acceptor 3–4× as much per store and won only
// against a reader calling Stats in a loop (docs/BENCHMARKS.md, "Batcher stats:
// seqlock or mutex").
type statCells struct {
	mu sync.Mutex
	s  Stats // guarded by mu
}

func (c *statCells) store(s Stats) {
	c.mu.Lock()
	c.s = s
	c.mu.Unlock()
}

// load returns one consistent snapshot.
func (c *statCells) load() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}
