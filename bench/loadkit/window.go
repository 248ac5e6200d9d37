package loadkit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultStall is how long Window.Acquire waits for the subscribers before it gives
// up on the events outstanding: far longer than any delivery of a healthy run.
const DefaultStall = 2 * time.Second

// Window is the end-to-end flow control of a saturated run: a publisher may have at
// most max events sent that some subscriber has not received yet. Both benches of
// `make bench-compare` use it with the same max, so that neither system is overrun
// (a NATS server cuts off a slow consumer; a fanout node's per-peer buffer evicts its
// oldest events when full) and the saturated figures are of lossless runs.
//
// It counts events, not bytes or requests: publishers call Acquire before a send and
// Forget for events the system refused (they will never arrive); subscribers call
// Received for every event of the run they get, warmup included. It needs every sent
// event to reach every subscriber: a workload that coalesces (hot keys) cannot use it.
//
// If the subscribers do not catch up within the stall timeout (events were lost),
// Acquire writes the outstanding events off, counts a stall and lets the publisher
// go on: the loss shows in the results, not as a hung run.
//
// A nil *Window is no flow control: Acquire returns at once.
type Window struct {
	max   int64
	stall time.Duration

	mu   sync.Mutex   // serialises Acquire across publishers
	sent atomic.Int64 // events sent, minus the forgotten and written-off ones
	got  []atomic.Int64
	need atomic.Int64  // while a publisher waits: the count every subscriber must reach
	wake chan struct{} // capacity 1

	stalls, writtenOff atomic.Int64
}

// NewWindow returns a window of max events over subscribers subscribers, or nil when
// max <= 0. stall <= 0 means DefaultStall.
func NewWindow(max int64, subscribers int, stall time.Duration) *Window {
	if max <= 0 || subscribers <= 0 {
		return nil
	}
	if stall <= 0 {
		stall = DefaultStall
	}
	return &Window{max: max, stall: stall, got: make([]atomic.Int64, subscribers), wake: make(chan struct{}, 1)}
}

// Max is the window's size in events (0 for nil).
func (w *Window) Max() int64 {
	if w == nil {
		return 0
	}
	return w.max
}

// low is the count of the subscriber furthest behind.
func (w *Window) low() int64 {
	l := w.got[0].Load()
	for i := 1; i < len(w.got); i++ {
		l = min(l, w.got[i].Load())
	}
	return l
}

// Acquire waits until n more events fit in the window, and counts them as sent.
// When they do not fit, it waits until they fit in half the window (hysteresis: one
// wake-up per half window, not one per send). A send larger than the window goes out
// once nothing is outstanding. It returns ctx.Err() if ctx ends first.
func (w *Window) Acquire(ctx context.Context, n int) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		sent, low := w.sent.Load(), w.low()
		if sent+int64(n)-low <= w.max || sent <= low {
			w.sent.Add(int64(n))
			return nil
		}
		// Wait until the window is half empty, not just until n fit: a publisher
		// woken for every few events would cost a goroutine switch per send.
		w.need.Store(sent + int64(n) - w.max/2)
		if w.low() >= w.need.Load() { // arrived meanwhile: Received may not have seen need
			w.need.Store(0)
			continue
		}
		if timer == nil {
			timer = time.NewTimer(w.stall)
		}
		select {
		case <-w.wake:
		case <-timer.C:
			// Nothing arrived for the whole stall timeout: write the outstanding
			// events off, so that the rest of the run is measured.
			w.stalls.Add(1)
			w.writtenOff.Add(sent - low)
			w.sent.Add(low - sent)
			timer = nil
		case <-ctx.Done():
			w.need.Store(0)
			return ctx.Err()
		}
		w.need.Store(0)
	}
}

// Received counts n events that subscriber sub (0-based) received, and wakes a
// waiting publisher once every subscriber has what it waits for.
func (w *Window) Received(sub, n int) {
	if w == nil {
		return
	}
	got := w.got[sub].Add(int64(n))
	if need := w.need.Load(); need > 0 && got >= need && w.low() >= need {
		w.poke()
	}
}

// Forget takes back n sent events that will never arrive (the system refused them).
func (w *Window) Forget(n int) {
	if w == nil || n <= 0 {
		return
	}
	w.sent.Add(-int64(n))
	w.poke()
}

func (w *Window) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Stalls is how many times Acquire gave up waiting, and how many events it wrote
// off then (0, 0 for nil).
func (w *Window) Stalls() (stalls, writtenOff int64) {
	if w == nil {
		return 0, 0
	}
	return w.stalls.Load(), w.writtenOff.Load()
}
