package timingwheel

import (
	"context"
	"time"
)

// Run advances w to now() on every receive from ticks, until ctx is done. It
// blocks: the caller runs it on a goroutine it owns, cancels ctx and waits for
// Run to return. Tests can feed ticks by hand; Driver feeds a time.Ticker.
func (w *Wheel) Run(ctx context.Context, ticks <-chan time.Time, now func() time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			w.Advance(now())
		}
	}
}

// Driver owns the goroutine and the time.Ticker that advance a wheel in
// production. Whoever calls StartDriver calls Stop.
type Driver struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has returned
}

// StartDriver starts a goroutine that advances w to now() every interval
// (Config.Tick is the natural choice) while w holds timers. While it is empty the
// goroutine sleeps, so an idle sidecar does not wake a thousand times a second; the
// next Add wakes it. It panics if interval <= 0, like time.NewTicker.
//
// after, if not nil, replaces the ticker: between two advances the goroutine waits
// on after(interval), so a test clock (with a matching now) drives the wheel. nil
// uses a time.Ticker, which allocates nothing per tick.
func StartDriver(w *Wheel, interval time.Duration, now func() time.Time, after func(time.Duration) <-chan time.Time) *Driver {
	if interval <= 0 {
		panic("timingwheel: non-positive interval for StartDriver")
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Driver{cancel: cancel, done: make(chan struct{})}
	var ticker *time.Ticker
	if after == nil {
		ticker = time.NewTicker(interval)
	}
	go func() {
		defer close(d.done)
		if ticker != nil {
			defer ticker.Stop()
		}
		var tick <-chan time.Time // the ticker's, or the pending after's until it fires
		for {
			if w.Len() == 0 && !sleep(ctx, w, ticker, interval) {
				return
			}
			if tick == nil {
				if ticker != nil {
					tick = ticker.C
				} else {
					tick = after(interval)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick:
				w.Advance(now())
				if ticker == nil {
					tick = nil
				}
			case <-w.wake: // a timer arrived while ticking; nothing to do
			}
		}
	}()
	return d
}

// sleep stops the ticker (if any) until the wheel is woken by an Add; false if ctx
// ended first.
func sleep(ctx context.Context, w *Wheel, ticker *time.Ticker, interval time.Duration) bool {
	if ticker != nil {
		ticker.Stop()
	}
	select {
	case <-w.wake:
		if ticker != nil {
			ticker.Reset(interval)
		}
		return true
	case <-ctx.Done():
		return false
	}
}

// Stop stops the goroutine and waits for it to return, so no callback is
// running when Stop returns (unless Stop is called from a callback, which
// deadlocks: don't). It is idempotent. Pending timers stay in the wheel.
func (d *Driver) Stop() {
	d.cancel()
	<-d.done
}
