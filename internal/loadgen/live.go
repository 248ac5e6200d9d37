package loadgen

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// phase names the part of the run the live line is in: warmup, run or drain. Run's
// goroutine sets it; the reporter reads it.
type phase struct{ v atomic.Value }

func newPhase() *phase {
	p := &phase{}
	p.v.Store("")
	return p
}

func (p *phase) set(s string) { p.v.Store(s) }
func (p *phase) get() string  { return p.v.Load().(string) }

// report writes one live line per cfg.Interval to cfg.Live until ctx is done:
// submitted/s and delivered/s over the last interval, the latency percentiles of the
// events delivered in it, and the first node's pending events (all its peers).
func (b *bench) report(ctx context.Context, ph *phase) {
	if b.cfg.Live == nil {
		return
	}
	tick := time.NewTicker(b.cfg.Interval)
	defer tick.Stop()
	var prevSub, prevDel uint64
	prevAt := b.clock.since()
	h := newHistogram()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := b.clock.since()
		var sub, del uint64
		for _, p := range b.pubs {
			sub += p.accepted.Load()
		}
		h.Reset()
		for _, s := range b.subs {
			del += s.rec.takeInterval(h)
		}
		l := liveLine{
			at: now - b.win.start, phase: b.phaseAt(prevAt, ph),
			submitted: perSecond(sub-prevSub, now-prevAt), delivered: perSecond(del-prevDel, now-prevAt),
			lat: summarize(h), pending: b.pending(ctx),
		}
		fmt.Fprintln(b.cfg.Live, l)
		prevSub, prevDel, prevAt = sub, del, now
	}
}

// phaseAt names the phase of an interval that started at offset from.
func (b *bench) phaseAt(from time.Duration, ph *phase) string {
	if p := ph.get(); p != "" {
		return p
	}
	if from < b.win.measureFrom-b.cfg.Interval/10 { // a tick may come a little late
		return "warmup"
	}
	return "run"
}

// pending sums pending over the first node's peers; -1 if GetStatus failed.
func (b *bench) pending(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Interval/2)
	defer cancel()
	st, err := b.status(ctx)
	if err != nil {
		return -1
	}
	var n uint64
	for _, p := range st.GetPeers() {
		n += p.GetPending()
	}
	return int64(n)
}

// liveLine is one line of the live view.
type liveLine struct {
	at                   time.Duration
	phase                string
	submitted, delivered float64
	lat                  Latency
	pending              int64
}

func (l liveLine) String() string {
	pending := "?"
	if l.pending >= 0 {
		pending = fmt.Sprint(l.pending)
	}
	return fmt.Sprintf("%6s %-6s  submitted %8.0f/s  delivered %8.0f/s  p50 %8s  p99 %8s  pending %s",
		l.at.Round(time.Second), l.phase, l.submitted, l.delivered, fmtUs(l.lat.P50), fmtUs(l.lat.P99), pending)
}
