package refresh

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrTimeout is the cause (context.Cause) of an attempt's context when the attempt
// runs past Config.Timeout, and Stats.LastError wraps it then.
var ErrTimeout = errors.New("refresh: attempt timed out")

// Func is the work of one attempt. It must return soon after ctx is done: the Task
// waits for it, at a timeout and at Stop alike, so a Func that ignores ctx holds the
// schedule and Stop up for as long as it runs.
type Func func(ctx context.Context) error

// Task runs a Func on seed 001's supervised schedule until Stop or until the context
// given to Start is done. Its methods are safe to call from any goroutine.
type Task struct {
	cfg     Config
	fn      Func
	trigger chan struct{} // capacity 1: a pending Trigger; read only by run
	cancel  context.CancelFunc
	done    chan struct{} // closed when run has returned
	failing bool          // the last attempt did not succeed; owned by run

	mu sync.Mutex
	st Stats // guarded by mu; written only by run
}

// Stats is a snapshot of a Task, for status pages and metrics.
type Stats struct {
	// Interval is the current interval: Config.Interval, doubled by each timeout since
	// the last success, at most Config.Interval*Config.MaxFactor.
	Interval time.Duration
	// ConsecutiveTimeouts counts the timeouts since the last success. Failures that
	// are not timeouts neither count nor reset it, as they leave Interval alone.
	ConsecutiveTimeouts int
	// Attempts counts the attempts started. Attempts - (Successes + Timeouts +
	// Failures) is 1 while one runs (Running), and stays 1 if Stop cut it short.
	Attempts uint64
	// Successes, Timeouts and Failures count the finished attempts by Outcome.
	Successes, Timeouts, Failures uint64
	// Running says whether an attempt is running now.
	Running bool
	// Next is when the next attempt is due (a Trigger brings it forward); zero while
	// one runs.
	Next time.Time
	// LastSuccess is when the last successful attempt ended; zero: none yet.
	LastSuccess time.Time
	// LastError is the error of the last attempt that timed out or failed, kept after
	// later successes (compare LastErrorAt with LastSuccess); nil: none yet.
	LastError error
	// LastErrorAt is when that attempt ended.
	LastErrorAt time.Time
}

// Start validates cfg and starts the goroutine that runs fn: the first attempt at
// once, each next one an interval after the previous one ended. The goroutine runs
// until Stop is called or ctx is done; whoever calls Start calls Stop.
func Start(ctx context.Context, cfg Config, fn Func) (*Task, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, errors.New("refresh: Start: nil Func")
	}
	ctx, cancel := context.WithCancel(ctx)
	t := &Task{
		cfg:     cfg,
		fn:      fn,
		trigger: make(chan struct{}, 1),
		cancel:  cancel,
		done:    make(chan struct{}),
		st:      Stats{Interval: cfg.Interval},
	}
	go t.run(ctx)
	return t, nil
}

// Stop cancels a running attempt's context, waits for the attempt and the goroutine
// to return, and keeps the Stats as they are. It is idempotent. It must not be
// called from the Func, which it would wait for.
func (t *Task) Stop() {
	t.cancel()
	<-t.done
}

// Trigger asks for an attempt now: if the Task is waiting, the wait ends at once,
// even a wait lengthened by timeouts; if an attempt is running, the next one starts
// as soon as it ends. Triggers coalesce: many before an attempt starts cause one.
// It never blocks, and does nothing after Stop.
func (t *Task) Trigger() {
	select {
	case t.trigger <- struct{}{}:
	default:
	}
}

// Stats returns a snapshot of the Task's counters.
func (t *Task) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st
}

// run is the Task's goroutine: attempt, record, wait, until ctx is done.
func (t *Task) run(ctx context.Context) {
	defer close(t.done)
	s := newSchedule(t.cfg.Interval, t.cfg.MaxFactor)
	for {
		o, ok, err := t.attempt(ctx)
		if !ok { // cut short by Stop: no outcome
			t.mu.Lock()
			t.st.Running = false
			t.mu.Unlock()
			return
		}
		wait := s.record(o)
		t.finish(o, err, s)
		if !t.wait(ctx, wait) {
			return
		}
	}
}

// attempt runs fn once, bounded by Config.Timeout, and waits for it to return. ok is
// false if ctx ended first: Stop cut the attempt short and it has no outcome.
func (t *Task) attempt(ctx context.Context) (o Outcome, ok bool, err error) {
	select {
	case <-t.trigger: // this attempt serves every Trigger made before it
	default:
	}
	t.mu.Lock()
	t.st.Attempts++
	t.st.Running, t.st.Next = true, time.Time{}
	t.mu.Unlock()

	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := t.cfg.Clock.NewTimer(t.cfg.Timeout)
	defer timer.Stop()
	res := make(chan error, 1)
	go func() { res <- t.fn(actx) }()

	select {
	case err = <-res:
		o = t.classify(err)
	case <-timer.C():
		cancel(ErrTimeout)
		err = overran(t.cfg.Timeout, <-res)
		o = Timeout
	case <-ctx.Done():
		<-res
	}
	return o, ctx.Err() == nil, err
}

// classify gives the outcome of an attempt that returned err within its timeout.
func (t *Task) classify(err error) Outcome {
	switch {
	case err == nil:
		return Success
	case t.cfg.IsTimeout(err):
		return Timeout
	}
	return Failure
}

// overran is the error of an attempt still running at its timeout, which returned err
// once its context was cancelled: a timeout whatever err is, as its answer came late.
func overran(timeout time.Duration, err error) error {
	if err == nil {
		return fmt.Errorf("%w after %v (it returned nil once cancelled)", ErrTimeout, timeout)
	}
	return fmt.Errorf("%w after %v: %w", ErrTimeout, timeout, err)
}

// finish records an attempt's outcome in the Stats, with s already updated by it, and
// logs it.
func (t *Task) finish(o Outcome, err error, s schedule) {
	now := t.cfg.Clock.Now()
	t.mu.Lock()
	t.st.Running = false
	t.st.Interval, t.st.ConsecutiveTimeouts = s.interval, s.timeouts
	t.st.Next = now.Add(s.interval)
	switch o {
	case Success:
		t.st.Successes++
		t.st.LastSuccess = now
	case Timeout:
		t.st.Timeouts++
	case Failure:
		t.st.Failures++
	}
	if o != Success {
		t.st.LastError, t.st.LastErrorAt = err, now
	}
	t.mu.Unlock()

	recovered := o == Success && t.failing
	t.failing = o != Success
	log := t.cfg.Logger.With("task", t.cfg.Name, "next_in", s.interval)
	switch {
	case o == Timeout:
		log.Warn("refresh: attempt timed out", "err", err, "consecutive_timeouts", s.timeouts)
	case o == Failure:
		log.Warn("refresh: attempt failed", "err", err)
	case recovered:
		log.Info("refresh: attempt succeeded again")
	}
}

// wait waits d, or less if Trigger is called; false if ctx ended first.
func (t *Task) wait(ctx context.Context, d time.Duration) bool {
	timer := t.cfg.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return true
	case <-t.trigger:
		return true
	case <-ctx.Done():
		return false
	}
}
