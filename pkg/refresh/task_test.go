package refresh

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// call is one attempt of a probe's Func, held until the test answers it.
type call struct {
	ctx context.Context
	ret chan error // the test sends what the Func returns
}

// probe is an instrumented Func: each attempt is handed to the test as a call, and
// two attempts running at once are noticed.
type probe struct {
	calls     chan call
	running   atomic.Int32
	overlap   atomic.Bool
	ignoreCtx bool // the Func returns only when answered, even once cancelled
}

func newProbe() *probe { return &probe{calls: make(chan call, 1)} }

func (p *probe) fn(ctx context.Context) error {
	if p.running.Add(1) != 1 {
		p.overlap.Store(true)
	}
	defer p.running.Add(-1)
	c := call{ctx: ctx, ret: make(chan error, 1)}
	p.calls <- c
	if p.ignoreCtx {
		return <-c.ret
	}
	select {
	case err := <-c.ret:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next waits for the next attempt, with a deadline for a broken test only.
func (p *probe) next(t *testing.T) call {
	t.Helper()
	select {
	case c := <-p.calls:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no attempt within 10s")
		return call{}
	}
}

// harness is a Task on a fake clock with base interval 1s, cap 10s, timeout 100ms.
type harness struct {
	t    *testing.T
	clk  *fakeClock
	p    *probe
	task *Task
}

const (
	base    = time.Second
	timeout = 100 * time.Millisecond
)

func start(t *testing.T, p *probe) *harness {
	t.Helper()
	clk := newFakeClock()
	cfg := DefaultConfig()
	cfg.Name, cfg.Interval, cfg.Timeout, cfg.Clock = "test", base, timeout, clk
	task, err := Start(context.Background(), cfg, p.fn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(task.Stop)
	return &harness{t: t, clk: clk, p: p, task: task}
}

// begin waits for the next attempt: its timeout timer, then its call.
func (h *harness) begin() call {
	h.t.Helper()
	if tm := h.clk.next(h.t); tm.d != timeout {
		h.t.Fatalf("attempt timer of %v, want %v", tm.d, timeout)
	}
	return h.p.next(h.t)
}

// waits checks that the Task now waits want before the next attempt, and lets the
// wait pass.
func (h *harness) waits(want time.Duration) {
	h.t.Helper()
	if tm := h.clk.next(h.t); tm.d != want {
		h.t.Fatalf("waits %v, want %v", tm.d, want)
	}
	if st := h.task.Stats(); st.Interval != want || st.Running || !st.Next.Equal(h.clk.Now().Add(want)) {
		h.t.Fatalf("Stats %+v, want Interval %v, not running, Next = now+interval", st, want)
	}
	h.clk.Advance(want)
}

// timesOut lets the attempt c run into its timeout and checks what its Func saw.
func (h *harness) timesOut(c call) {
	h.t.Helper()
	h.clk.Advance(timeout)
	<-c.ctx.Done()
	if cause := context.Cause(c.ctx); cause != ErrTimeout {
		h.t.Fatalf("cause of the attempt's cancellation = %v, want ErrTimeout", cause)
	}
}

func TestTimeoutsDoubleUpToCapAndSuccessResets(t *testing.T) {
	h := start(t, newProbe())
	for i, want := range []time.Duration{2 * base, 4 * base, 8 * base, 10 * base, 10 * base} {
		h.timesOut(h.begin())
		h.waits(want)
		if st := h.task.Stats(); st.ConsecutiveTimeouts != i+1 || st.Timeouts != uint64(i+1) || !errors.Is(st.LastError, ErrTimeout) {
			t.Fatalf("after timeout %d: %+v", i+1, st)
		}
	}
	h.begin().ret <- nil
	h.waits(base)
	st := h.task.Stats()
	if st.ConsecutiveTimeouts != 0 || st.Successes != 1 || st.Attempts != 6 || !st.LastSuccess.Equal(h.clk.Now().Add(-base)) {
		t.Fatalf("after the success: %+v", st)
	}
	if st.LastError == nil || st.LastErrorAt.After(st.LastSuccess) {
		t.Fatalf("LastError %v at %v should stay, older than LastSuccess %v", st.LastError, st.LastErrorAt, st.LastSuccess)
	}
}

func TestTimeoutErrorFromFuncCountsAsTimeout(t *testing.T) {
	h := start(t, newProbe())
	dnsTimeout := &net.DNSError{Err: "i/o timeout", Name: "peers.test", IsTimeout: true}
	h.begin().ret <- dnsTimeout
	h.waits(2 * base)
	if st := h.task.Stats(); st.Timeouts != 1 || st.LastError != dnsTimeout {
		t.Fatalf("%+v", st)
	}
}

func TestFailuresKeepTheInterval(t *testing.T) {
	h := start(t, newProbe())
	boom := errors.New("SERVFAIL")
	h.begin().ret <- boom
	h.waits(base) // a failure at base stays at base
	h.timesOut(h.begin())
	h.waits(2 * base)
	h.begin().ret <- boom
	h.waits(2 * base) // ... and a doubled interval stays doubled
	h.begin().ret <- boom
	h.waits(2 * base)
	if st := h.task.Stats(); st.Failures != 3 || st.ConsecutiveTimeouts != 1 || st.LastError != boom {
		t.Fatalf("%+v", st)
	}
	h.timesOut(h.begin()) // the failures did not reset the run of timeouts
	h.waits(4 * base)
	h.begin().ret <- nil
	h.waits(base)
}

func TestOverrunningAttemptIsWaitedFor(t *testing.T) {
	p := newProbe()
	p.ignoreCtx = true
	h := start(t, p)
	c := h.begin()
	h.timesOut(c)
	h.clk.Advance(100 * base) // the attempt still runs: nothing may start
	h.clk.noTimer(t)
	if st := h.task.Stats(); !st.Running || st.Attempts != 1 || st.Timeouts != 0 {
		t.Fatalf("while overrunning: %+v", st)
	}
	c.ret <- nil // it returns at last, too late: still a timeout
	h.waits(2 * base)
	if st := h.task.Stats(); st.Timeouts != 1 || !errors.Is(st.LastError, ErrTimeout) {
		t.Fatalf("%+v", st)
	}
	h.begin().ret <- nil
	if p.overlap.Load() {
		t.Fatal("two attempts ran at once")
	}
}

// Trigger is Task.Trigger, for the harness.
func (h *harness) Trigger() { h.task.Trigger() }

func TestTrigger(t *testing.T) {
	h := start(t, newProbe())
	h.begin().ret <- errors.New("boom")
	if tm := h.clk.next(t); tm.d != base {
		t.Fatalf("waits %v", tm.d)
	}
	h.Trigger() // while waiting: the wait ends without the clock moving
	h.Trigger() // coalesces with the first, whichever way they interleave with the Task
	c := h.begin()
	h.Trigger() // while running: the next wait ends at once
	c.ret <- nil
	if tm := h.clk.next(t); tm.d != base {
		t.Fatalf("waits %v", tm.d)
	}
	h.begin().ret <- nil
	h.waits(base) // no Trigger is left over: only the clock starts the next attempt
	h.begin()
	if st := h.task.Stats(); st.Attempts != 4 {
		t.Fatalf("%+v", st)
	}
}

func TestStopDuringAttempt(t *testing.T) {
	h := start(t, newProbe())
	c := h.begin()
	stopped := stopAsync(h.task)
	<-c.ctx.Done()
	if cause := context.Cause(c.ctx); cause != context.Canceled {
		t.Fatalf("cause = %v, want context.Canceled", cause)
	}
	waitStopped(t, stopped)
	st := h.task.Stats()
	if st.Attempts != 1 || st.Running || st.Successes+st.Timeouts+st.Failures != 0 {
		t.Fatalf("%+v", st)
	}
	h.task.Stop() // idempotent
	h.clk.noTimer(t)
}

func TestStopDuringOverrun(t *testing.T) {
	p := newProbe()
	p.ignoreCtx = true
	h := start(t, p)
	c := h.begin()
	h.timesOut(c)
	stopped := stopAsync(h.task)
	select {
	case <-stopped:
		t.Fatal("Stop returned while the attempt still ran")
	default:
	}
	c.ret <- nil // Stop waits for the attempt
	waitStopped(t, stopped)
	// Whether the attempt counts as a timeout depends on whether Stop came before it
	// returned, which this test does not order.
	if st := h.task.Stats(); st.Running || st.Timeouts > 1 || st.Attempts != 1 {
		t.Fatalf("%+v", st)
	}
}

func TestStopWhileWaiting(t *testing.T) {
	h := start(t, newProbe())
	h.begin().ret <- nil
	if tm := h.clk.next(t); tm.d != base {
		t.Fatalf("waits %v", tm.d)
	}
	waitStopped(t, stopAsync(h.task))
	h.clk.Advance(base)
	h.clk.noTimer(t)
	if st := h.task.Stats(); st.Attempts != 1 || st.Successes != 1 {
		t.Fatalf("%+v", st)
	}
}

func TestParentContextEndsTask(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := newProbe()
	clk := newFakeClock()
	cfg := DefaultConfig()
	cfg.Clock = clk
	task, err := Start(ctx, cfg, p.fn)
	if err != nil {
		t.Fatal(err)
	}
	p.next(t).ret <- nil
	cancel()
	select {
	case <-task.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the goroutine did not end with its context")
	}
	task.Stop()
}

func TestStartRefuses(t *testing.T) {
	if _, err := Start(context.Background(), Config{}, func(context.Context) error { return nil }); err == nil {
		t.Fatal("Start accepted a zero Config")
	}
	if _, err := Start(context.Background(), DefaultConfig(), nil); err == nil {
		t.Fatal("Start accepted a nil Func")
	}
}

// TestSystemClock runs many short attempts of random outcomes on the real clock: no
// two overlap, and the counters add up. Nothing here waits for time to pass as an
// assertion; the real clock only paces the attempts.
func TestSystemClock(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	outcomes := make([]int, 300)
	for i := range outcomes {
		outcomes[i] = rng.IntN(4)
	}
	var running atomic.Int32
	var overlap atomic.Bool
	var n atomic.Int64
	enough := make(chan struct{})
	fn := func(ctx context.Context) error {
		if running.Add(1) != 1 {
			overlap.Store(true)
		}
		defer running.Add(-1)
		i := n.Add(1) - 1
		if i == int64(len(outcomes)) {
			close(enough)
		}
		switch outcomes[i%int64(len(outcomes))] {
		case 0:
			return nil
		case 1:
			return errors.New("boom")
		case 2:
			return context.DeadlineExceeded
		}
		<-ctx.Done() // overruns its timeout
		return ctx.Err()
	}
	cfg := Config{Interval: 100 * time.Microsecond, MaxFactor: 4, Timeout: time.Millisecond}
	task, err := Start(context.Background(), cfg, fn)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatal("300 attempts did not run within 30s")
	}
	task.Stop()
	st := task.Stats()
	if overlap.Load() {
		t.Fatal("two attempts ran at once")
	}
	if done := st.Successes + st.Timeouts + st.Failures; st.Attempts != done && st.Attempts != done+1 {
		t.Fatalf("counters do not add up: %+v", st)
	}
	if st.Interval < cfg.Interval || st.Interval > 4*cfg.Interval || st.Running {
		t.Fatalf("%+v", st)
	}
}

func stopAsync(task *Task) chan struct{} {
	stopped := make(chan struct{})
	go func() {
		task.Stop()
		close(stopped)
	}()
	return stopped
}

func waitStopped(t *testing.T, stopped chan struct{}) {
	t.Helper()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return within 10s")
	}
}
