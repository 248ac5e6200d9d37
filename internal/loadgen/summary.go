package loadgen

import (
	"time"

	"github.com/fanout/fanout/bench/loadkit"
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// result turns the counters into a Result. base and final are the first node's
// GetStatus before and after the run (final may be nil after an interrupt).
func (b *bench) result(base, final *peerCounters, m *measurement) *Result {
	r := b.workload()
	r.Interrupted = m.interrupted
	all, allDue, lag, to, from := newHistogram(), newHistogram(), newHistogram(), newHistogram(), newHistogram()
	var lastMeasured time.Duration
	for _, s := range b.subs {
		snap := s.rec.snapshot()
		all.Merge(snap.hist)
		allDue.Merge(snap.histDue)
		to.Merge(snap.toOrigin)
		from.Merge(snap.fromOrigin)
		lastMeasured = max(lastMeasured, snap.lastMeasured)
		r.Delivered += snap.measured
		if s.fromSubmittedAt.Load() {
			r.LatencyFrom = "submitted_at"
		}
		r.SubscriberResults = append(r.SubscriberResults, SubscriberResult{
			Addr: s.addr, NodeID: s.nodeID, Delivered: snap.measured,
			PerSec: perSecond(snap.measured, b.deliveryWindow(snap.lastMeasured, m)), Latency: summarize(snap.hist),
		})
	}
	for _, p := range b.pubs {
		r.Submitted += p.measured.Load()
		r.NotAccepted += p.notAccepted.Load()
		if p.lag != nil {
			lag.Merge(p.lag)
		}
	}
	r.Latency, r.LatencyFromDue, r.SendLag = summarize(all), summarize(allDue), summarize(lag)
	if to.TotalCount() > 0 {
		t, f := summarize(to), summarize(from)
		r.ToOrigin, r.FromOrigin = &t, &f
	}
	if b.cfg.Keys == 0 && !m.interrupted {
		want, lost := r.Submitted*uint64(len(b.subs)), uint64(0)
		if r.Delivered < want {
			lost = want - r.Delivered
		}
		r.Lost = &lost
	}
	r.WindowStalls, r.WrittenOff = b.window.Stalls()
	r.SubmitPerSec = perSecond(r.Submitted, b.publishWindow(m))
	r.DeliveredPerSec = perSecond(r.Delivered, b.deliveryWindow(lastMeasured, m))
	if final != nil {
		d := final.minus(base)
		r.Overridden, r.WireEvents, r.Dropped, r.Retried = d.overridden, d.wire, d.dropped, d.replayed
	}
	if b.latest != nil {
		b.convergence(r, m)
	}
	if m.self0 > 0 && m.self1 > m.self0 {
		r.BenchCPUSeconds = (m.self1 - m.self0).Seconds()
	}
	return r
}

func (b *bench) workload() *Result {
	c := b.cfg
	return &Result{
		Nodes: len(b.addrs), Spawned: c.Spawn > 0, Publishers: c.Publishers, Client: c.Client, Subscribers: len(b.subs),
		Rate: c.Rate, Batch: c.Batch, Pipeline: c.Pipeline, Window: c.Window, Payload: c.Payload, Keys: c.Keys,
		DurationSec: c.Duration.Seconds(), WarmupSec: c.Warmup.Seconds(), LatencyFrom: "payload",
	}
}

// publishWindow is the measured publishing time: cfg.Duration, or less if interrupted.
func (b *bench) publishWindow(m *measurement) time.Duration {
	end := b.win.end
	if m.interrupted {
		end = min(end, m.drainedAt)
	}
	return end - b.win.measureFrom
}

// deliveryWindow is the time measured deliveries took: from the start of the measured
// window to the last measured arrival, but at least the publishing window (a system
// that keeps up delivers in the same time as it was offered).
func (b *bench) deliveryWindow(lastMeasured time.Duration, m *measurement) time.Duration {
	return max(b.publishWindow(m), lastMeasured-b.win.measureFrom)
}

func (b *bench) convergence(r *Result, m *measurement) {
	ok := m.converged
	r.Converged = &ok
	if ok {
		ms := float64(max(0, m.convergeAt-m.lastSend)) / float64(time.Millisecond)
		r.ConvergeMs = &ms
	}
}

// addUsage fills in the spawned nodes' resource use. cl has stopped. CPU is the
// difference of /proc samples over the measured window and drain when both exist,
// else the whole life of each process (from its rusage).
func addUsage(r *Result, cl *cluster, cpu0, cpu1 []time.Duration) {
	procs := make([]loadkit.Process, len(cl.children))
	for i, ch := range cl.children {
		procs[i] = loadkit.Process{ID: ch.id, State: ch.cmd.ProcessState}
	}
	var total time.Duration
	r.NodeResults, total, r.NodePeakRSSBytes = loadkit.NodesUsage(procs, cpu0, cpu1)
	r.NodeCPUSeconds = total.Seconds()
	if r.Delivered > 0 {
		r.CPUUsPerDelivered = float64(total.Microseconds()) / float64(r.Delivered)
	}
}

// peerCounters are the first node's counters summed over its peers.
type peerCounters struct {
	overridden, wire, dropped, replayed uint64
}

func countersOf(st *fanoutv1.GetStatusResponse) *peerCounters {
	if st == nil {
		return nil
	}
	c := &peerCounters{}
	for _, p := range st.GetPeers() {
		c.overridden += p.GetOverridden()
		c.wire += p.GetSucceeded() + p.GetStale()
		c.dropped += p.GetOverflow() + p.GetExpired() + p.GetPermanent()
		c.replayed += p.GetReplayed()
	}
	return c
}

// minus is the difference c - base, floored at 0 per counter (a peer that was
// removed takes its counts with it).
func (c *peerCounters) minus(base *peerCounters) peerCounters {
	sub := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return peerCounters{
		overridden: sub(c.overridden, base.overridden),
		wire:       sub(c.wire, base.wire),
		dropped:    sub(c.dropped, base.dropped),
		replayed:   sub(c.replayed, base.replayed),
	}
}
