package jetstream

import (
	"context"
	"sync"
	"time"

	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
)

// outbox holds the events Publish handed over until a publisher has put them into
// the stream: FIFO, bounded in bytes (Config.OutboxBytes). It never blocks Publish:
// an event over the bound is refused (the caller drops it as FateOverflow).
type outbox struct {
	mu sync.Mutex
	// q is the queued tasks, oldest first. Guarded by mu.
	q []*batcher.Task[wire.Outgoing]
	// bytes is the event bytes of q and of the tasks in flight. Guarded by mu.
	// Invariant: bytes <= limit.
	bytes int64
	// inFlight is the tasks popped and not yet done; flying holds them. Guarded
	// by mu. Invariant: len(flying) == inFlight.
	inFlight int
	flying   map[*batcher.Task[wire.Outgoing]]struct{}
	// closed: drop emptied it for good; push refuses. Guarded by mu.
	closed bool
	limit  int64
	// wake has a value when q may be non-empty (capacity 1, sent without blocking);
	// idle when a task was done.
	wake, idle chan struct{}
}

func (o *outbox) init(limit int64) {
	o.limit, o.wake, o.idle = limit, make(chan struct{}, 1), make(chan struct{}, 1)
	o.flying = make(map[*batcher.Task[wire.Outgoing]]struct{})
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push queues t; if it cannot, it says t's fate: FateOverflow if its bytes do not
// fit, FateStopped once the outbox is closed.
func (o *outbox) push(t *batcher.Task[wire.Outgoing]) (batcher.Fate, bool) {
	n := int64(len(t.Value.Raw))
	o.mu.Lock()
	fate, ok := batcher.FateOverflow, o.bytes+n <= o.limit && !o.closed
	switch {
	case ok:
		o.q = append(o.q, t)
		o.bytes += n
	case o.closed:
		fate = batcher.FateStopped
	}
	o.mu.Unlock()
	if ok {
		signal(o.wake)
	}
	return fate, ok
}

// pop takes the oldest task (it is then in flight until done), waiting for one
// until ctx ends (false).
func (o *outbox) pop(ctx context.Context) (*batcher.Task[wire.Outgoing], bool) {
	for {
		o.mu.Lock()
		if len(o.q) > 0 {
			t := o.q[0]
			o.q[0] = nil
			o.q = o.q[1:]
			o.inFlight++
			o.flying[t] = struct{}{}
			more := len(o.q) > 0
			o.mu.Unlock()
			if more {
				signal(o.wake) // the next publisher
			}
			return t, true
		}
		o.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, false
		case <-o.wake:
		}
	}
}

// done ends t's flight.
func (o *outbox) done(t *batcher.Task[wire.Outgoing]) {
	o.mu.Lock()
	o.inFlight--
	delete(o.flying, t)
	o.bytes -= int64(len(t.Value.Raw))
	o.mu.Unlock()
	signal(o.idle)
}

// waitEmpty waits until nothing is queued or in flight, or ctx ends.
func (o *outbox) waitEmpty(ctx context.Context) error {
	for {
		o.mu.Lock()
		empty := len(o.q) == 0 && o.inFlight == 0
		o.mu.Unlock()
		if empty {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-o.idle:
		}
	}
}

// drop closes the outbox and returns what it held (Close: no publisher runs).
func (o *outbox) drop() []*batcher.Task[wire.Outgoing] {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.q
	o.q, o.bytes, o.closed = nil, 0, true
	return q
}

// stats is the queued tasks, the bytes of those and of the ones in flight, and the
// ones in flight.
func (o *outbox) stats() (queued int, bytes int64, inFlight int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.q), o.bytes, o.inFlight
}

// len is the tasks queued or in flight.
func (o *outbox) len() int {
	q, _, f := o.stats()
	return q + f
}

// oldest is the earliest Submitted of the tasks queued or in flight, or now if
// there is none (or all are later).
func (o *outbox) oldest(now time.Time) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range o.q {
		if t.Submitted.Before(now) {
			now = t.Submitted
		}
	}
	for t := range o.flying {
		if t.Submitted.Before(now) {
			now = t.Submitted
		}
	}
	return now
}
