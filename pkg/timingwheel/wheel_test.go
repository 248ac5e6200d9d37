package timingwheel

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func newWheel(tb testing.TB) *Wheel {
	tb.Helper()
	cfg := DefaultConfig()
	cfg.Start = t0
	w, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// recorder collects the names of fired callbacks in firing order.
type recorder struct {
	mu    sync.Mutex
	fired []string
}

func (r *recorder) fn(name string) func() {
	return func() {
		r.mu.Lock()
		r.fired = append(r.fired, name)
		r.mu.Unlock()
	}
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.fired
	r.fired = nil
	return out
}

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Start = t0
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr bool
	}{
		{"default with start", func(*Config) {}, false},
		{"zero tick", func(c *Config) { c.Tick = 0 }, true},
		{"negative tick", func(c *Config) { c.Tick = -time.Millisecond }, true},
		{"one slot", func(c *Config) { c.Slots = 1 }, true},
		{"too many slots", func(c *Config) { c.Slots = maxSlots + 1 }, true},
		{"two slots", func(c *Config) { c.Slots = 2 }, false},
		{"zero start", func(c *Config) { c.Start = time.Time{} }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.mutate(&cfg)
			_, err := New(cfg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New() err = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

func TestExpiryOrder(t *testing.T) {
	tests := []struct {
		name string
		step time.Duration // Advance granularity; 0 means one jump to the end
	}{
		{"one jump", 0},
		{"1ms steps", time.Millisecond},
		{"7.3ms steps", 7300 * time.Microsecond},
		{"1s steps", time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWheel(t)
			rng := rand.New(rand.NewPCG(1, 2))
			type fired struct {
				when time.Time
				seq  int
			}
			var got []fired
			const n = 2000
			for i := range n {
				// Coarse deadlines so that many tie; ties must keep Add order.
				when := at(time.Duration(rng.IntN(3000)) * 5 * time.Millisecond)
				w.Add(when, func() {
					got = append(got, fired{when, i})
					if now := w.Now(); now.Before(when) {
						t.Errorf("timer %d due %v ran early at %v", i, when, now)
					}
				})
			}
			end := at(15 * time.Second)
			advanceBy(w, end, tt.step)
			if len(got) != n {
				t.Fatalf("fired %d timers, want %d", len(got), n)
			}
			if !slices.IsSortedFunc(got, func(a, b fired) int {
				if c := a.when.Compare(b.when); c != 0 {
					return c
				}
				return a.seq - b.seq
			}) {
				t.Fatal("timers did not fire in (deadline, Add order)")
			}
		})
	}
}

// advanceBy advances w to end in steps of step (one jump if step is 0).
func advanceBy(w *Wheel, end time.Time, step time.Duration) {
	if step > 0 {
		for now := w.Now().Add(step); now.Before(end); now = now.Add(step) {
			w.Advance(now)
		}
	}
	w.Advance(end)
}

func TestFiresAtFirstAdvanceReachingDeadline(t *testing.T) {
	tests := []struct {
		name     string
		deadline time.Duration
	}{
		{"mid first tick", 500 * time.Microsecond},
		{"tick boundary", time.Millisecond},
		{"level 0 last slot", 19 * time.Millisecond},
		{"level 0 span boundary", 20 * time.Millisecond},
		{"level 1 span boundary", 400 * time.Millisecond},
		{"level 2 span boundary", 8 * time.Second},
		{"level 3 span boundary", 160 * time.Second},
		{"just past level 3", 160*time.Second + time.Nanosecond},
		{"level 4", time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, lead := range []time.Duration{time.Nanosecond, time.Millisecond / 2, 3 * time.Millisecond} {
				w := newWheel(t)
				var r recorder
				w.Add(at(tt.deadline), r.fn("x"))
				if tt.deadline > lead {
					w.Advance(at(tt.deadline - lead))
					if got := r.take(); len(got) != 0 {
						t.Fatalf("lead %v: fired %v before the deadline", lead, got)
					}
				}
				w.Advance(at(tt.deadline))
				if got := r.take(); len(got) != 1 {
					t.Fatalf("lead %v: fired %v at the deadline, want [x]", lead, got)
				}
				if w.Len() != 0 {
					t.Fatalf("Len() = %d after firing, want 0", w.Len())
				}
			}
		})
	}
}

func TestPastDeadlineRunsAtNextAdvance(t *testing.T) {
	w := newWheel(t)
	var r recorder
	w.Advance(at(5500 * time.Microsecond))
	w.Add(at(time.Millisecond), r.fn("long past"))
	w.Add(at(5200*time.Microsecond), r.fn("past, current slot"))
	w.Add(at(5500*time.Microsecond), r.fn("exactly now"))
	w.Add(at(5700*time.Microsecond), r.fn("current slot, future"))
	w.Add(t0.Add(-time.Hour), r.fn("before start"))
	if got := r.take(); len(got) != 0 {
		t.Fatalf("Add ran %v synchronously", got)
	}
	// An Advance that does not move the clock (or moves it back) still runs them.
	w.Advance(at(time.Millisecond))
	want := []string{"before start", "long past", "past, current slot", "exactly now"}
	if got := r.take(); !slices.Equal(got, want) {
		t.Fatalf("fired %v, want %v", got, want)
	}
	w.Advance(at(5699 * time.Microsecond))
	if got := r.take(); len(got) != 0 {
		t.Fatalf("fired %v early", got)
	}
	w.Advance(at(5700 * time.Microsecond))
	if got := r.take(); !slices.Equal(got, []string{"current slot, future"}) {
		t.Fatalf("fired %v, want [current slot, future]", got)
	}
}

func TestStop(t *testing.T) {
	w := newWheel(t)
	var r recorder
	a := w.Add(at(10*time.Millisecond), r.fn("a"))
	b := w.Add(at(10*time.Second), r.fn("b"))
	if w.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", w.Len())
	}
	if !b.Stop() {
		t.Fatal("first Stop of a pending timer returned false")
	}
	if b.Stop() {
		t.Fatal("second Stop returned true")
	}
	w.Advance(at(time.Minute))
	if got := r.take(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("fired %v, want [a]", got)
	}
	if a.Stop() {
		t.Fatal("Stop after firing returned true")
	}
	if w.Len() != 0 {
		t.Fatalf("Len() = %d, want 0", w.Len())
	}
}

func TestStopFromCallback(t *testing.T) {
	w := newWheel(t)
	var r recorder
	var self, victim, later *Timer
	var selfStop, victimStop, laterStop bool
	self = w.Add(at(5*time.Millisecond), func() {
		r.fn("self")()
		selfStop = self.Stop()
		victimStop = victim.Stop()
		laterStop = later.Stop()
	})
	victim = w.Add(at(6*time.Millisecond), r.fn("victim")) // due in the same Advance
	later = w.Add(at(time.Hour), r.fn("later"))
	w.Advance(at(10 * time.Millisecond))
	w.Advance(at(2 * time.Hour))
	if got := r.take(); !slices.Equal(got, []string{"self"}) {
		t.Fatalf("fired %v, want [self]", got)
	}
	if selfStop {
		t.Error("a callback stopping itself got true")
	}
	if !victimStop || !laterStop {
		t.Errorf("stopping other timers from a callback: victim %v, later %v; want true, true", victimStop, laterStop)
	}
	if w.Len() != 0 {
		t.Fatalf("Len() = %d, want 0", w.Len())
	}
}

func TestAddFromCallback(t *testing.T) {
	w := newWheel(t)
	var r recorder
	w.Add(at(5*time.Millisecond), func() {
		r.fn("outer")()
		w.Add(at(time.Millisecond), r.fn("past"))           // next Advance
		w.Add(at(8*time.Millisecond), r.fn("same advance")) // not in this Advance's batch
		w.AfterFunc(time.Second, r.fn("relative"))          // relative to the wheel's time, 10ms
	})
	w.Advance(at(10 * time.Millisecond))
	if got := r.take(); !slices.Equal(got, []string{"outer"}) {
		t.Fatalf("fired %v, want [outer]", got)
	}
	w.Advance(at(10 * time.Millisecond))
	if got := r.take(); !slices.Equal(got, []string{"past", "same advance"}) {
		t.Fatalf("fired %v, want [past same advance]", got)
	}
	w.Advance(at(1009 * time.Millisecond))
	if got := r.take(); len(got) != 0 {
		t.Fatalf("fired %v early", got)
	}
	w.Advance(at(1010 * time.Millisecond))
	if got := r.take(); !slices.Equal(got, []string{"relative"}) {
		t.Fatalf("fired %v, want [relative]", got)
	}
}

func TestManyLevels(t *testing.T) {
	// With 1ms x 20 slots, levels span 20ms, 400ms, 8s, 160s, 53m20s, 17h46m,
	// 14.8 days, 296 days, 16 years, ...
	deadlines := []time.Duration{
		3 * time.Millisecond, 150 * time.Millisecond, 5 * time.Second,
		100 * time.Second, 40 * time.Minute, 10 * time.Hour, 10 * 24 * time.Hour,
		200 * 24 * time.Hour, 10 * 365 * 24 * time.Hour, 200 * 365 * 24 * time.Hour,
	}
	tests := []struct {
		name  string
		steps []time.Duration // successive Advance times
	}{
		{"one jump", []time.Duration{250 * 365 * 24 * time.Hour}},
		{"each deadline minus 1ns then exact", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWheel(t)
			var r recorder
			for i, d := range deadlines {
				w.Add(at(d), r.fn(d.String()))
				if i > 0 && i+1 > len(w.levels) {
					t.Fatalf("after adding %v: %d levels", d, len(w.levels))
				}
			}
			if len(w.levels) < 9 {
				t.Fatalf("%d levels, want >= 9", len(w.levels))
			}
			steps := tt.steps
			if steps == nil {
				for _, d := range deadlines {
					steps = append(steps, d-time.Nanosecond, d)
				}
			}
			var want []string
			for _, s := range steps {
				w.Advance(at(s))
				for _, d := range deadlines {
					if d <= s && !slices.Contains(want, d.String()) {
						want = append(want, d.String())
					}
				}
				if got := r.fired; !slices.Equal(got, want) {
					t.Fatalf("after Advance(+%v): fired %v, want %v", s, got, want)
				}
			}
		})
	}
}

func TestFarFutureIsClamped(t *testing.T) {
	w := newWheel(t)
	var r recorder
	tm := w.Add(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), r.fn("never"))
	w.AfterFunc(time.Duration(1<<63-1), r.fn("never either"))
	w.Advance(at(250 * 365 * 24 * time.Hour))
	if got := r.take(); len(got) != 0 {
		t.Fatalf("fired %v", got)
	}
	if !tm.Stop() || w.Len() != 1 {
		t.Fatalf("Stop or Len wrong: Len() = %d", w.Len())
	}
}

func TestMillionTimers(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 50_000
	}
	w := newWheel(t)
	rng := rand.New(rand.NewPCG(3, 4))
	counts := make([]uint8, n)
	timers := make([]*Timer, n)
	span := 10 * time.Second
	for i := range n {
		timers[i] = w.Add(at(time.Duration(rng.Int64N(int64(span)))), func() { counts[i]++ })
	}
	cancelled := 0
	for i := 0; i < n; i += 3 {
		if !timers[i].Stop() {
			t.Fatalf("Stop(%d) = false", i)
		}
		cancelled++
	}
	if w.Len() != n-cancelled {
		t.Fatalf("Len() = %d, want %d", w.Len(), n-cancelled)
	}
	advanceBy(w, at(span), 7*time.Millisecond)
	for i, c := range counts {
		if want := uint8(min(i%3, 1)); c != want {
			t.Fatalf("timer %d fired %d times, want %d", i, c, want)
		}
	}
	if w.Len() != 0 {
		t.Fatalf("Len() = %d, want 0", w.Len())
	}
}

func TestConcurrentAddStopAdvance(t *testing.T) {
	w := newWheel(t)
	const adders, perAdder = 8, 5000
	var fired [adders * perAdder]atomic.Int32
	var stopped atomic.Int64
	var wg sync.WaitGroup
	for g := range adders {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 5))
			for i := range perAdder {
				id := g*perAdder + i
				when := w.Now().Add(time.Duration(rng.Int64N(int64(500 * time.Millisecond))))
				tm := w.Add(when, func() { fired[id].Add(1) })
				if rng.IntN(2) == 0 && tm.Stop() {
					stopped.Add(1)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	now := t0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
			now = now.Add(time.Millisecond)
			w.Advance(now)
			runtime.Gosched() // let the adders run on a 2-core machine
		}
	}
	w.Advance(now.Add(time.Second))
	var total int64
	for i := range fired {
		if c := fired[i].Load(); c > 1 {
			t.Fatalf("timer %d fired %d times", i, c)
		} else {
			total += int64(c)
		}
	}
	if total+stopped.Load() != adders*perAdder {
		t.Fatalf("fired %d + stopped %d != %d added", total, stopped.Load(), adders*perAdder)
	}
	if w.Len() != 0 {
		t.Fatalf("Len() = %d, want 0", w.Len())
	}
}

func TestRunWithManualTicks(t *testing.T) {
	w := newWheel(t)
	fired := make(chan struct{})
	w.Add(at(3*time.Millisecond), func() { close(fired) })
	ticks := make(chan time.Time)
	var clock atomic.Int64 // ns since t0, the fake clock's reading
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx, ticks, func() time.Time { return at(time.Duration(clock.Load())) }) })
	defer func() { cancel(); wg.Wait() }()
	for _, ms := range []int64{1, 2, 3} {
		clock.Store(ms * int64(time.Millisecond))
		ticks <- time.Time{} // the tick's value is ignored; now() is read
	}
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("timer did not fire after the fake clock reached its deadline")
	}
}

func TestDriverRealClock(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Start = time.Now()
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := StartDriver(w, cfg.Tick, time.Now, nil)
	defer d.Stop()
	fired := make(chan time.Time, 1)
	deadline := time.Now().Add(5 * time.Millisecond)
	w.Add(deadline, func() { fired <- time.Now() })
	select {
	case got := <-fired:
		if got.Before(deadline) {
			t.Fatalf("fired at %v, before its deadline %v", got, deadline)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("driver did not fire the timer")
	}
	d.Stop()
	d.Stop() // idempotent
}

func TestDeadlineAndNow(t *testing.T) {
	w := newWheel(t)
	tm := w.Add(at(1500*time.Millisecond), func() {})
	if got := tm.Deadline(); !got.Equal(at(1500 * time.Millisecond)) {
		t.Fatalf("Deadline() = %v", got)
	}
	w.Advance(at(time.Second))
	if got := w.Now(); !got.Equal(at(time.Second)) {
		t.Fatalf("Now() = %v", got)
	}
	w.Advance(at(time.Millisecond)) // backwards: ignored
	if got := w.Now(); !got.Equal(at(time.Second)) {
		t.Fatalf("Now() after a backwards Advance = %v", got)
	}
	if tm2 := w.AfterFunc(time.Second, func() {}); !tm2.Deadline().Equal(at(2 * time.Second)) {
		t.Fatalf("AfterFunc deadline = %v", tm2.Deadline())
	}
}

// TestDriverWakesAfterIdle: the driver sleeps while the wheel is empty and the next Add
// wakes it, so timers added after an idle spell still fire.
func TestDriverWakesAfterIdle(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Start = time.Now()
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := StartDriver(w, time.Millisecond, time.Now, nil)
	defer d.Stop()
	for round := range 3 {
		fired := make(chan struct{})
		w.Add(time.Now().Add(2*time.Millisecond), func() { close(fired) })
		select {
		case <-fired:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: a timer added to an idle wheel never fired", round)
		}
		if w.Len() != 0 {
			t.Fatalf("round %d: Len = %d after firing, want 0 (driver goes back to sleep)", round, w.Len())
		}
	}
}

// TestDriverOnInjectedClock: with an after func the driver advances only when the
// test's clock says so, to the test's now, so a test drives deadlines without sleeping.
func TestDriverOnInjectedClock(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Start = time.Unix(1000, 0)
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := cfg.Start
	readNow := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	waits := make(chan chan time.Time, 16) // the driver's pending waits, in order
	after := func(d time.Duration) <-chan time.Time {
		if d != cfg.Tick {
			t.Errorf("driver waits %v, want the tick %v", d, cfg.Tick)
		}
		ch := make(chan time.Time, 1)
		waits <- ch
		return ch
	}
	d := StartDriver(w, cfg.Tick, readNow, after)
	defer d.Stop()
	fired := make(chan struct{})
	w.Add(cfg.Start.Add(5*time.Millisecond), func() { close(fired) })
	const waitTimeout = 10 * time.Second
	// next returns the driver's next wait; it is only started once the driver has
	// applied the previous one (or, with no timers left, never).
	next := func(what string) chan time.Time {
		t.Helper()
		select {
		case ch := <-waits:
			return ch
		case <-fired:
			t.Fatalf("%s: fired early", what)
		case <-time.After(waitTimeout):
			t.Fatalf("%s: the driver never waited on the injected clock", what)
		}
		return nil
	}
	set := func(d time.Duration) time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = cfg.Start.Add(d)
		return now
	}
	next("at Start") <- set(0)
	next("at +0ms") <- set(4 * time.Millisecond)
	next("at +4ms") <- set(5 * time.Millisecond) // due: fires
	select {
	case <-fired:
	case <-time.After(waitTimeout):
		t.Fatal("the timer did not fire once the injected clock passed its deadline")
	}
}
