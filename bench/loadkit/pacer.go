package loadkit

import (
	"context"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// DueAt is the open-loop schedule: the offset from the start of publishing at which
// the send that carries events [sent, sent+batch) is due when rate events/s are
// offered. A send is due when its last event has been offered, so batching never
// sends ahead of the rate. rate <= 0 means unpaced: always due.
func DueAt(sent int64, batch int, rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(float64(sent+int64(batch)) / rate * float64(time.Second))
}

// Pacer paces one publisher on the open-loop schedule DueAt, from start to end
// (offsets from the run's epoch, read with since). It is not safe for concurrent use:
// each publisher has its own.
//
// The loop of a publisher is:
//
//	for {
//		due, ok, err := p.Next(ctx) // sleeps until the next send is due
//		if !ok || err != nil { break }
//		... wait for flow control, if any (unpaced runs) ...
//		s := p.Stamp(due)           // read the clock right before the send
//		... write s into each event's payload, send ...
//		p.Done(n, s)
//	}
//
// Next never waits for replies: a send that is late (the publisher was blocked, or
// the timer fired late) is due at once, and the lateness is recorded (Lag). Go's
// timers on Linux round a sleep up to about 1 ms, so a publisher at 10,000 sends/s
// wakes about once per millisecond and sends what has come due since, in a burst;
// both systems get the same bursts.
type Pacer struct {
	since      func() time.Duration
	rate       float64
	batch      int
	start, end time.Duration
	events     int64 // events of the sends done so far
	timer      *time.Timer
	lag        *hdrhistogram.Histogram
}

// NewPacer returns a pacer offering rate events/s (<= 0: unpaced, as fast as the
// publisher sends) in sends of batch events, from start until end.
func NewPacer(since func() time.Duration, rate float64, batch int, start, end time.Duration) *Pacer {
	return &Pacer{since: since, rate: rate, batch: max(1, batch), start: start, end: end, lag: NewHistogram()}
}

// Paced reports whether the pacer follows a schedule (rate > 0).
func (p *Pacer) Paced() bool { return p.rate > 0 }

// Next waits until the next send is due and returns its due offset. ok is false once
// the schedule is over: for a paced run when the next send would be due at or after
// end, for an unpaced one once end has passed. Unpaced sends are due at once: due is
// the current offset.
func (p *Pacer) Next(ctx context.Context) (due time.Duration, ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	if p.rate <= 0 {
		now := p.since()
		return now, now < p.end, nil
	}
	due = p.start + DueAt(p.events, p.batch, p.rate)
	if due >= p.end {
		return 0, false, nil
	}
	d := due - p.since()
	if d <= 0 {
		return due, true, nil
	}
	if p.timer == nil {
		p.timer = time.NewTimer(d)
	} else {
		p.timer.Reset(d)
	}
	select {
	case <-p.timer.C:
		return due, true, nil
	case <-ctx.Done():
		return 0, false, ctx.Err()
	}
}

// Stamp reads the clock for a send that was due at due: call it right before the
// send. An unpaced send's due time is its send time.
func (p *Pacer) Stamp(due time.Duration) Stamp {
	now := p.since()
	if p.rate <= 0 {
		due = now
	}
	return Stamp{Sent: now, Due: due}
}

// Done records a send of n events stamped s: the schedule moves on by n events, and
// the send's lag behind its due time is recorded.
func (p *Pacer) Done(n int, s Stamp) {
	p.events += int64(n)
	p.lag.RecordValue(Us(s.Sent - s.Due)) //nolint:errcheck // Us clamps to the range
}

// Lag is the histogram of every send's lateness (send time minus due time, clamped
// to at least 1 µs): 1 µs throughout for an unpaced run.
func (p *Pacer) Lag() *hdrhistogram.Histogram { return p.lag }

// Stop releases the pacer's timer.
func (p *Pacer) Stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}
