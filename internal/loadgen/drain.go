package loadgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fanout/fanout/bench/loadkit"
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// publishAndDrain runs the publishers and the live reporter, samples the spawned
// nodes' CPU at the start of the measured window and at the end, and after the last
// submit waits for the subscribers to catch up.
func (b *bench) publishAndDrain(ctx context.Context, cl *cluster, m *measurement, subErrs <-chan error) error {
	repCtx, stopReport := context.WithCancel(ctx)
	var repWG sync.WaitGroup
	phase := newPhase()
	repWG.Add(1)
	go func() { defer repWG.Done(); b.report(repCtx, phase) }()
	defer func() { stopReport(); repWG.Wait() }()

	pubErr := b.publish(ctx, cl, m)
	for _, p := range b.pubs {
		m.lastSend = max(m.lastSend, time.Duration(p.lastSend.Load()))
	}
	err := pubErr
	if err == nil {
		phase.set("drain")
		err = b.drain(ctx, m, subErrs)
	}
	m.drainedAt = b.clock.since()
	m.self1, _ = loadkit.SelfCPU()
	if cl != nil {
		m.cpu1, _ = cl.cpu()
		m.conns = cl.conns()
	}
	m.engine.end()
	return err
}

// publish runs every publisher in its own goroutine and waits for all. At the start
// of the measured window it samples the nodes' CPU and the first node's counters. The first error cancels the rest.
func (b *bench) publish(ctx context.Context, cl *cluster, m *measurement) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(b.pubs))
	for _, p := range b.pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.run(ctx); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }() // ends with the publishers; waited for below
	measureAt := time.NewTimer(max(0, b.win.measureFrom-b.clock.since()))
	defer measureAt.Stop()
	select {
	case <-measureAt.C:
		if cl != nil {
			m.cpu0, _ = cl.cpu()
		}
		m.engine.start(b.cfg.EnginePIDs)
		m.self0, _ = loadkit.SelfCPU()
		m.base, _ = b.status(ctx) // counters count from here; nil falls back to the start
	case <-done:
	}
	<-done
	close(errs)
	return errors.Join(collect(errs)...)
}

func collect(errs <-chan error) []error {
	var out []error
	for err := range errs {
		if !errors.Is(err, context.Canceled) || len(out) == 0 {
			out = append(out, err)
		}
	}
	return out
}

// drain waits until the subscribers have caught up: with hot keys, until each holds
// the latest version of every key; otherwise until each has received every accepted
// event. It gives up after cfg.DrainTimeout, or once the first node has nothing
// pending or in flight and no subscriber has received anything for quietFor (the
// missing events were dropped: see the dropped field).
func (b *bench) drain(ctx context.Context, m *measurement, subErrs <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.DrainTimeout)
	defer cancel()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	var accepted uint64
	for _, p := range b.pubs {
		accepted += p.accepted.Load()
	}
	q := quiet{}
	for {
		if b.caughtUp(accepted, m) {
			return nil
		}
		if q.check(ctx, b) {
			return nil
		}
		select {
		case err := <-subErrs:
			return err
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil // the drain timed out: the result says what is missing
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// caughtUp reports whether every subscriber has caught up, and records convergence.
func (b *bench) caughtUp(accepted uint64, m *measurement) bool {
	if b.latest == nil {
		for _, s := range b.subs {
			if s.rec.totalCount() < accepted {
				return false
			}
		}
		return true
	}
	var last time.Duration
	for _, s := range b.subs {
		at, ok := s.holds(b.latest)
		if !ok {
			return false
		}
		last = max(last, at)
	}
	m.converged, m.convergeAt = true, last
	return true
}

// quiet detects a drain that cannot finish: nothing pending or in flight at the first
// node and no arrival anywhere for quietFor.
type quiet struct {
	lastCheck   time.Time
	lastArrival time.Duration
}

func (q *quiet) check(ctx context.Context, b *bench) bool {
	now := b.cfg.Now()
	if now.Sub(q.lastCheck) < quietFor/5 {
		return false
	}
	q.lastCheck = now
	for _, s := range b.subs {
		q.lastArrival = max(q.lastArrival, s.rec.arrival())
	}
	if b.clock.since()-q.lastArrival < quietFor {
		return false
	}
	st, err := b.status(ctx)
	if err != nil {
		return false
	}
	var busy uint64
	for _, p := range st.GetPeers() {
		busy += p.GetPending() + p.GetInFlight() + p.GetAcceptorQueue() + p.GetReprocessQueue()
	}
	return busy == 0
}

// status calls GetStatus on the first node.
func (b *bench) status(ctx context.Context) (*fanoutv1.GetStatusResponse, error) {
	return statusOf(ctx, b.first, b.addrs[0])
}

func statusOf(ctx context.Context, c fanoutv1.FanoutServiceClient, addr string) (*fanoutv1.GetStatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	st, err := c.GetStatus(ctx, &fanoutv1.GetStatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("GetStatus %s: %w", addr, err)
	}
	return st, nil
}
