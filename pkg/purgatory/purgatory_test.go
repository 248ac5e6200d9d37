package purgatory

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fanout/fanout/pkg/timingwheel"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// harness is a purgatory over a wheel that the test drives by hand.
type harness struct {
	w *timingwheel.Wheel
	p *Purgatory[string]
}

func newHarness(tb testing.TB, purgeInterval int) harness {
	tb.Helper()
	wc := timingwheel.DefaultConfig()
	wc.Start = t0
	w, err := timingwheel.New(wc)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Wheel = w
	if purgeInterval > 0 {
		cfg.PurgeInterval = purgeInterval
	}
	p, err := New[string](cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return harness{w: w, p: p}
}

// testOp completes once ready is set. It records its callbacks.
type testOp struct {
	Op
	ready atomic.Bool

	tries       atomic.Int32
	completes   atomic.Int32
	expirations atomic.Int32
	inTry       atomic.Int32 // TryComplete calls in flight, to check they are serialized
	overlapped  atomic.Bool

	mu    sync.Mutex
	trace []string // "expire", "complete", in call order
}

func newOp(deadline time.Time) *testOp {
	op := &testOp{}
	op.Init(op, deadline)
	return op
}

func (o *testOp) TryComplete() bool {
	if o.inTry.Add(1) > 1 {
		o.overlapped.Store(true)
	}
	defer o.inTry.Add(-1)
	o.tries.Add(1)
	if o.ready.Load() {
		return o.ForceComplete()
	}
	return false
}

func (o *testOp) OnComplete() {
	o.completes.Add(1)
	o.record("complete")
}

func (o *testOp) OnExpiration() {
	o.expirations.Add(1)
	o.record("expire")
}

func (o *testOp) record(s string) {
	o.mu.Lock()
	o.trace = append(o.trace, s)
	o.mu.Unlock()
}

func (o *testOp) getTrace() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.trace)
}

// counts checks the purgatory's and wheel's gauges.
func (h harness) counts(t *testing.T, watched, delayed, keys int) {
	t.Helper()
	if got := h.p.Watched(); got != watched {
		t.Errorf("Watched() = %d, want %d", got, watched)
	}
	if got := h.p.Delayed(); got != delayed {
		t.Errorf("Delayed() = %d, want %d", got, delayed)
	}
	if got := h.w.Len(); got != delayed {
		t.Errorf("wheel Len() = %d, want %d", got, delayed)
	}
	if got := h.p.Keys(); got != keys {
		t.Errorf("Keys() = %d, want %d", got, keys)
	}
}

func TestConfigValidate(t *testing.T) {
	h := newHarness(t, 0)
	tests := []struct {
		name    string
		cfg     Config
		wantErr bool
	}{
		{"ok", Config{Wheel: h.w, PurgeInterval: 1}, false},
		{"no wheel", Config{PurgeInterval: 1}, true},
		{"zero purge interval", Config{Wheel: h.w}, true},
		{"default without wheel", DefaultConfig(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New[int](tt.cfg); (err != nil) != tt.wantErr {
				t.Fatalf("New() err = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

func TestCompletesAtOnce(t *testing.T) {
	h := newHarness(t, 0)
	op := newOp(at(time.Second))
	op.ready.Store(true)
	if !h.p.TryCompleteElseWatch(op, []string{"a"}) {
		t.Fatal("TryCompleteElseWatch = false for a ready op")
	}
	if op.completes.Load() != 1 || !op.IsCompleted() {
		t.Fatalf("completes = %d, IsCompleted = %v", op.completes.Load(), op.IsCompleted())
	}
	h.counts(t, 0, 0, 0)
}

// TestCheckAndComplete: an op completes on a CheckAndComplete of one of its keys
// once ready, and leaves every key's watch list at that moment; the others then find
// nothing; the deadline no longer fires.
func TestCheckAndComplete(t *testing.T) {
	h := newHarness(t, 0)
	op := newOp(at(time.Second))
	if h.p.TryCompleteElseWatch(op, []string{"a", "b"}) {
		t.Fatal("TryCompleteElseWatch = true for an op that is not ready")
	}
	if got := op.tries.Load(); got != 2 {
		t.Fatalf("TryComplete called %d times, want 2 (before and after watching)", got)
	}
	h.counts(t, 2, 1, 2)
	if n := h.p.CheckAndComplete("a"); n != 0 {
		t.Fatalf("CheckAndComplete(a) = %d before ready, want 0", n)
	}
	if n := h.p.CheckAndComplete("nobody"); n != 0 {
		t.Fatalf("CheckAndComplete(nobody) = %d", n)
	}
	op.ready.Store(true)
	if n := h.p.CheckAndComplete("a"); n != 1 {
		t.Fatalf("CheckAndComplete(a) = %d, want 1", n)
	}
	// The op left both keys' lists at once (not only a's: an op of thousands of
	// keys would otherwise pin them until a purge), and its timer stopped.
	h.counts(t, 0, 0, 0)
	if n := h.p.CheckAndComplete("b"); n != 0 {
		t.Fatalf("CheckAndComplete(b) = %d, want 0 (already complete)", n)
	}
	h.counts(t, 0, 0, 0)
	h.w.Advance(at(time.Hour))
	if op.completes.Load() != 1 || op.expirations.Load() != 0 {
		t.Fatalf("completes %d, expirations %d; want 1, 0", op.completes.Load(), op.expirations.Load())
	}
}

func TestExpiry(t *testing.T) {
	h := newHarness(t, 0)
	op := newOp(at(5 * time.Second))
	h.p.TryCompleteElseWatch(op, []string{"a"})
	h.w.Advance(at(5*time.Second - time.Nanosecond))
	if op.IsCompleted() {
		t.Fatal("completed before the deadline")
	}
	h.w.Advance(at(5 * time.Second))
	if got := op.getTrace(); !slices.Equal(got, []string{"expire", "complete"}) {
		t.Fatalf("callbacks %v, want [expire complete]", got)
	}
	h.counts(t, 1, 0, 1) // still watched until a sweep
	op.ready.Store(true)
	if n := h.p.CheckAndComplete("a"); n != 0 {
		t.Fatalf("CheckAndComplete after expiry = %d, want 0", n)
	}
	if op.completes.Load() != 1 {
		t.Fatalf("completes = %d, want 1", op.completes.Load())
	}
	h.counts(t, 0, 0, 0)
}

func TestDeadlineAlreadyPassed(t *testing.T) {
	h := newHarness(t, 0)
	h.w.Advance(at(time.Minute))
	op := newOp(at(time.Second))
	if h.p.TryCompleteElseWatch(op, []string{"a"}) {
		t.Fatal("TryCompleteElseWatch = true")
	}
	if op.IsCompleted() {
		t.Fatal("expired synchronously; want at the next Advance")
	}
	h.w.Advance(at(time.Minute))
	if got := op.getTrace(); !slices.Equal(got, []string{"expire", "complete"}) {
		t.Fatalf("callbacks %v, want [expire complete]", got)
	}
}

// readyOnSecondTry becomes ready while it is being watched: the change a
// CheckAndComplete would have seen had the op been watched already.
type readyOnSecondTry struct{ testOp }

func (o *readyOnSecondTry) TryComplete() bool {
	if o.tries.Add(1) == 2 {
		return o.ForceComplete()
	}
	return false
}

func TestSecondTryClosesRace(t *testing.T) {
	h := newHarness(t, 0)
	op := &readyOnSecondTry{}
	op.Init(op, at(time.Second))
	if !h.p.TryCompleteElseWatch(op, []string{"a"}) {
		t.Fatal("TryCompleteElseWatch = false; the second try should complete it")
	}
	if op.completes.Load() != 1 {
		t.Fatalf("completes = %d", op.completes.Load())
	}
	h.counts(t, 1, 0, 1) // watched, no timer; swept by the next check of a
	h.p.CheckAndComplete("a")
	h.counts(t, 0, 0, 0)
}

func TestForceCompleteElsewhere(t *testing.T) {
	h := newHarness(t, 0)
	op := newOp(at(time.Second))
	h.p.TryCompleteElseWatch(op, []string{"a"})
	if !op.ForceComplete() {
		t.Fatal("first ForceComplete = false")
	}
	if op.ForceComplete() {
		t.Fatal("second ForceComplete = true")
	}
	h.counts(t, 1, 0, 1) // timer stopped at once; watch entry left for a sweep
	h.w.Advance(at(time.Hour))
	if got := op.getTrace(); !slices.Equal(got, []string{"complete"}) {
		t.Fatalf("callbacks %v, want [complete]", got)
	}
	if h.p.Cancel(op) {
		t.Fatal("Cancel of a completed op = true")
	}
	h.counts(t, 0, 0, 0) // Cancel removed it from its watch lists
}

func TestCancel(t *testing.T) {
	h := newHarness(t, 0)
	op := newOp(at(time.Second))
	other := newOp(at(time.Second))
	h.p.TryCompleteElseWatch(op, []string{"a", "b", "c"})
	h.p.TryCompleteElseWatch(other, []string{"b"})
	h.counts(t, 4, 2, 3)
	if !h.p.Cancel(op) {
		t.Fatal("Cancel = false for a waiting op")
	}
	h.counts(t, 1, 1, 1)
	if h.p.Cancel(op) {
		t.Fatal("second Cancel = true")
	}
	op.ready.Store(true)
	if n := h.p.CheckAndComplete("a"); n != 0 || op.ForceComplete() {
		t.Fatal("a cancelled op completed")
	}
	h.w.Advance(at(time.Hour))
	if got := op.getTrace(); len(got) != 0 {
		t.Fatalf("cancelled op got callbacks %v", got)
	}
	if got := other.getTrace(); !slices.Equal(got, []string{"expire", "complete"}) {
		t.Fatalf("other op: callbacks %v", got)
	}
}

func TestNoKeys(t *testing.T) {
	h := newHarness(t, 0)
	op := newOp(at(time.Second))
	if h.p.TryCompleteElseWatch(op, nil) {
		t.Fatal("TryCompleteElseWatch = true")
	}
	h.counts(t, 0, 1, 0)
	h.w.Advance(at(time.Second))
	if op.expirations.Load() != 1 || op.completes.Load() != 1 {
		t.Fatal("an op without keys did not expire")
	}
}

func TestMisusePanics(t *testing.T) {
	h := newHarness(t, 0)
	tests := []struct {
		name string
		op   func() DelayedOperation
	}{
		{"no Init", func() DelayedOperation { return &testOp{} }},
		{"twice", func() DelayedOperation {
			op := newOp(at(time.Second))
			h.p.TryCompleteElseWatch(op, []string{"a"})
			return op
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := tt.op()
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			h.p.TryCompleteElseWatch(op, []string{"a"})
		})
	}
}

// reentrant calls back into the purgatory from its callbacks.
type reentrant struct {
	testOp
	p    *Purgatory[string]
	next *testOp
}

func (o *reentrant) OnComplete() {
	o.testOp.OnComplete()
	o.p.CheckAndComplete("next")
	o.p.TryCompleteElseWatch(o.next, []string{"later"})
}

func TestCallbacksMayReenter(t *testing.T) {
	tests := []struct {
		name   string
		finish func(h harness, op *reentrant)
	}{
		{"completed by CheckAndComplete", func(h harness, op *reentrant) {
			op.ready.Store(true)
			h.p.CheckAndComplete("a")
		}},
		{"completed by expiry", func(h harness, _ *reentrant) { h.w.Advance(at(time.Second)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 0)
			op := &reentrant{p: h.p, next: newOp(at(time.Hour))}
			op.Init(op, at(time.Second))
			h.p.TryCompleteElseWatch(op, []string{"a"})
			tt.finish(h, op)
			if op.completes.Load() != 1 || !h.p.Cancel(op.next) {
				t.Fatal("reentrant callback did not run, or did not watch the next op")
			}
		})
	}
}

func TestPurgeBoundsCompletedGarbage(t *testing.T) {
	const purgeInterval = 10
	tests := []struct {
		name   string
		finish func(h harness, ops []*testOp) // completes ops without a CheckAndComplete of their key
	}{
		{"expiry", func(h harness, _ []*testOp) { h.w.Advance(h.w.Now().Add(time.Hour)) }},
		{"ForceComplete elsewhere", func(_ harness, ops []*testOp) {
			for _, op := range ops {
				op.ForceComplete()
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, purgeInterval)
			for round := range 50 {
				ops := make([]*testOp, 1000)
				for i := range ops {
					ops[i] = newOp(h.w.Now().Add(time.Second))
					// Two keys per op, distinct in every round: nothing reuses them.
					h.p.TryCompleteElseWatch(ops[i], []string{fmt.Sprint("x", round, i), fmt.Sprint("y", round, i)})
				}
				tt.finish(h, ops)
				// The next round's first watch triggers a purge if the
				// expiries did not; then at most purgeInterval completed ops
				// (2 keys each) remain.
				h.p.TryCompleteElseWatch(newOp(h.w.Now().Add(time.Hour)), nil)
				if k := h.p.Keys(); k > 2*(purgeInterval+1) {
					t.Fatalf("round %d: %d keys still watched after completion", round, k)
				}
				if w := h.p.Watched(); w > 2*(purgeInterval+1) {
					t.Fatalf("round %d: %d watch entries", round, w)
				}
			}
			h.p.mu.Lock()
			peak := h.p.peakKeys
			h.p.mu.Unlock()
			if peak > 2*1000+2*(purgeInterval+1) {
				t.Fatalf("peak keys %d: the map was not rebuilt after purges", peak)
			}
		})
	}
}

func TestTryCompleteIsSerialized(t *testing.T) {
	h := newHarness(t, 0)
	keys := []string{"a", "b", "c", "d"}
	ops := make([]*testOp, 100)
	for i := range ops {
		ops[i] = newOp(at(time.Hour))
		h.p.TryCompleteElseWatch(ops[i], keys)
	}
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			for range 50 {
				h.p.CheckAndComplete(k)
			}
		})
	}
	wg.Wait()
	for i, op := range ops {
		if op.overlapped.Load() {
			t.Fatalf("op %d: TryComplete ran concurrently with itself", i)
		}
		h.p.Cancel(op)
	}
}

// TestExactlyOnceUnderRaces completes the same operations concurrently by
// CheckAndComplete, ForceComplete, Cancel and expiry, and checks that each
// completes exactly once and that the winners add up.
func TestExactlyOnceUnderRaces(t *testing.T) {
	const workers, perWorker, nKeys = 8, 10_000, 64
	h := newHarness(t, 100)
	ops := make([]*testOp, workers*perWorker)
	var wins, cancels atomic.Int64
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for i := range perWorker {
				op := newOp(h.w.Now().Add(time.Duration(rng.IntN(20)) * time.Millisecond))
				ops[g*perWorker+i] = op
				key := fmt.Sprint(rng.IntN(nKeys))
				if h.p.TryCompleteElseWatch(op, []string{key, fmt.Sprint(rng.IntN(nKeys))}) {
					wins.Add(1)
				}
				switch rng.IntN(4) {
				case 0: // an ack arrives
					op.ready.Store(true)
					wins.Add(int64(h.p.CheckAndComplete(key)))
				case 1:
					if op.ForceComplete() {
						wins.Add(1)
					}
				case 2:
					if h.p.Cancel(op) {
						cancels.Add(1)
					}
				} // case 3: left to expire
			}
		})
	}
	// Meanwhile: a driver advancing the clock, and acks for random keys.
	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		now := t0
		for {
			select {
			case <-stop:
				return
			default:
				now = now.Add(time.Millisecond)
				h.w.Advance(now)
				runtime.Gosched() // let the workers run on a 2-core machine
			}
		}
	})
	bg.Go(func() {
		rng := rand.New(rand.NewPCG(99, 9))
		for {
			select {
			case <-stop:
				return
			default:
				wins.Add(int64(h.p.CheckAndComplete(fmt.Sprint(rng.IntN(nKeys)))))
				runtime.Gosched()
			}
		}
	})
	wg.Wait()
	close(stop)
	bg.Wait()
	h.w.Advance(h.w.Now().Add(time.Hour))

	var expired int64
	for i, op := range ops {
		c, e := op.completes.Load(), op.expirations.Load()
		if !op.IsCompleted() || c > 1 || e > c {
			t.Fatalf("op %d: completed %v, OnComplete %d times, OnExpiration %d times", i, op.IsCompleted(), c, e)
		}
		if tr := op.getTrace(); e == 1 && !slices.Equal(tr, []string{"expire", "complete"}) {
			t.Fatalf("op %d: callbacks %v", i, tr)
		}
		expired += int64(e)
	}
	t.Logf("wins %d, expired %d, cancelled %d", wins.Load(), expired, cancels.Load())
	if total := wins.Load() + expired + cancels.Load(); total != int64(len(ops)) {
		t.Fatalf("wins %d + expired %d + cancels %d = %d, want %d", wins.Load(), expired, cancels.Load(), total, len(ops))
	}
	if h.p.Delayed() != 0 || h.w.Len() != 0 {
		t.Fatalf("Delayed() = %d, wheel Len() = %d after everything completed", h.p.Delayed(), h.w.Len())
	}
	for k := range nKeys {
		h.p.CheckAndComplete(fmt.Sprint(k))
	}
	if h.p.Keys() != 0 || h.p.Watched() != 0 {
		t.Fatalf("Keys() = %d, Watched() = %d after sweeping every key", h.p.Keys(), h.p.Watched())
	}
}

// TestCompletionLeavesEveryList: an op completed by a CheckAndComplete of one of its
// keys leaves the lists of all its keys at once, and an op still waiting under one
// of those keys stays.
func TestCompletionLeavesEveryList(t *testing.T) {
	h := newHarness(t, 0)
	many := newOp(at(time.Second))
	other := newOp(at(time.Second))
	h.p.TryCompleteElseWatch(many, []string{"a", "b", "c"})
	h.p.TryCompleteElseWatch(other, []string{"b"})
	h.counts(t, 4, 2, 3)
	many.ready.Store(true)
	if n := h.p.CheckAndComplete("a"); n != 1 {
		t.Fatalf("CheckAndComplete(a) = %d, want 1", n)
	}
	h.counts(t, 1, 1, 1) // other, under b
	other.ready.Store(true)
	if n := h.p.CheckAndComplete("b"); n != 1 {
		t.Fatalf("CheckAndComplete(b) = %d, want 1", n)
	}
	h.counts(t, 0, 0, 0)
}
