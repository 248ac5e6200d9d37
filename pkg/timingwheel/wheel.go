package timingwheel

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Wheel is a hierarchical timing wheel. See the package documentation.
//
// Locking: mu guards the buckets, the levels, now and seq; it is held only for
// O(1) list surgery in Add and Stop, and for the bucket sweep in Advance.
// advanceMu serializes Advance calls, so callbacks never run concurrently with
// each other. Callbacks run with advanceMu held but mu released, so they may
// call Add, AfterFunc and Stop, but not Advance.
type Wheel struct {
	start time.Time // Config.Start; immutable
	tick  int64     // Config.Tick in ns; immutable
	slots int64     // Config.Slots; immutable

	pending atomic.Int64 // timers added and not yet fired or stopped
	// wake (capacity 1) is signalled when pending goes from 0 to 1, so that a Driver
	// can sleep while the wheel is empty instead of ticking.
	wake chan struct{}

	advanceMu sync.Mutex
	due       []*Timer // timers collected by the running Advance; guarded by advanceMu

	mu      sync.Mutex
	now     int64    // wheel time in ns since start; only Advance moves it, never backwards
	seq     uint64   // last Add's sequence number
	levels  []*level // levels[0] is the finest; grown by place, never shrunk
	expired bucket   // timers added with a deadline <= now; drained by the next Advance
}

// level is one ring of buckets. Invariant: a timer t in level i > 0 satisfies
// base+tick <= t.when < base+span, so it is never in the bucket holding now; a
// timer in level 0 satisfies now < t.when < base+span.
type level struct {
	tick    int64 // width of one bucket: Tick*Slots^i; immutable
	span    int64 // tick*Slots, or 0 if that overflows: the level then holds any deadline
	base    int64 // start of the bucket holding now: now - now%tick; guarded by Wheel.mu
	buckets []bucket
}

func (lv *level) holds(when int64) bool {
	return lv.span == 0 || when-lv.base < lv.span
}

func (lv *level) bucketOf(when int64, slots int64) *bucket {
	return &lv.buckets[(when/lv.tick)%slots]
}

// New returns a wheel whose time is cfg.Start.
func New(cfg Config) (*Wheel, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Wheel{start: cfg.Start, tick: int64(cfg.Tick), slots: int64(cfg.Slots), wake: make(chan struct{}, 1)}
	w.expired.init()
	w.addLevel()
	return w, nil
}

// addLevel adds an overflow level whose tick is the span of the level below.
// It is called only when the top level cannot hold a deadline, so that span
// did not overflow.
func (w *Wheel) addLevel() {
	tick := w.tick
	if n := len(w.levels); n > 0 {
		tick = w.levels[n-1].span
	}
	lv := &level{tick: tick, base: w.now - w.now%tick, buckets: make([]bucket, w.slots)}
	if tick <= math.MaxInt64/w.slots {
		lv.span = tick * w.slots
	}
	for i := range lv.buckets {
		lv.buckets[i].init()
	}
	w.levels = append(w.levels, lv)
}

// Add schedules fn to run at the first Advance whose time is at or after
// deadline. A deadline at or before the wheel's current time does not run
// synchronously: it runs at the next Advance, whatever that call's argument.
// fn runs on the goroutine calling Advance, so it must be short and must not
// panic; it may call Add, AfterFunc and Stop.
func (w *Wheel) Add(deadline time.Time, fn func()) *Timer {
	t := &Timer{when: w.offset(deadline), fn: fn, w: w}
	w.added()
	w.mu.Lock()
	w.seq++
	t.seq = w.seq
	w.place(t)
	w.mu.Unlock()
	return t
}

// AfterFunc schedules fn to run d after the wheel's current time (the time of
// the last Advance, or Start), like Add(Now().Add(d), fn). The wheel lags the
// real clock by up to the driver's interval, so a timer may run that much
// earlier than d after the call; and a Driver lets the wheel's time stand still
// while the wheel is empty, so after an idle spell the lag is the whole spell. Use
// Add with a deadline from your own clock when that matters (fanout does).
func (w *Wheel) AfterFunc(d time.Duration, fn func()) *Timer {
	t := &Timer{fn: fn, w: w}
	w.added()
	w.mu.Lock()
	t.when = satAdd(w.now, int64(d))
	w.seq++
	t.seq = w.seq
	w.place(t)
	w.mu.Unlock()
	return t
}

// added counts a new timer and wakes a sleeping Driver if the wheel was empty.
func (w *Wheel) added() {
	if w.pending.Add(1) == 1 {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Len returns the number of timers added and neither fired nor stopped.
func (w *Wheel) Len() int { return int(w.pending.Load()) }

// Now returns the wheel's time: the latest time passed to Advance, or Start.
func (w *Wheel) Now() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.start.Add(time.Duration(w.now))
}

// offset converts t to ns since start, saturating at the int64 range.
func (w *Wheel) offset(t time.Time) int64 {
	return int64(t.Sub(w.start)) // Sub saturates
}

// satAdd returns a+b, saturating at math.MaxInt64; a >= 0.
func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// place links t into the finest level that can hold its deadline, or into
// expired if it is due. Called with mu held.
func (w *Wheel) place(t *Timer) {
	if t.when <= w.now {
		w.expired.push(t)
		return
	}
	for i := 0; ; i++ {
		if i == len(w.levels) {
			w.addLevel()
		}
		if lv := w.levels[i]; lv.holds(t.when) {
			lv.bucketOf(t.when, w.slots).push(t)
			return
		}
	}
}

// Advance moves the wheel's time to now and runs every pending callback whose
// deadline is at or before it, in deadline order, ties in Add order. A now
// earlier than the wheel's time does not move it back (but still runs timers
// added with a past deadline). Callbacks run on the calling goroutine, after
// mu is released. Advance must not be called from inside a callback.
//
// Cost: O(levels*Slots) bucket visits at most, however far the clock jumps,
// plus O(k log k) for the k timers that move or fire.
func (w *Wheel) Advance(now time.Time) {
	w.advanceMu.Lock()
	defer w.advanceMu.Unlock()
	w.mu.Lock()
	w.collect(w.offset(now))
	w.mu.Unlock()
	w.fire()
}

// collect moves the wheel to t, appending due timers to w.due and re-placing
// the others of every bucket the clock passed. Called with both locks held.
func (w *Wheel) collect(t int64) {
	t = max(t, w.now)
	w.sweep(&w.expired, t)
	if t == w.now {
		return
	}
	old := w.now
	w.now = t
	for i, lv := range w.levels {
		from, to := old/lv.tick, t/lv.tick
		lv.base = to * lv.tick
		if i > 0 {
			if from == to {
				break // this level and every coarser one stay in their bucket
			}
			from++ // level i > 0 never holds timers in the bucket of old
		}
		w.sweepRange(lv, from, to, t)
	}
}

// sweepRange sweeps the buckets of lv numbered from..to (absolute bucket
// numbers, time/tick). A range wider than the ring sweeps every bucket once.
func (w *Wheel) sweepRange(lv *level, from, to, t int64) {
	if to-from+1 >= w.slots {
		from, to = 0, w.slots-1
	}
	for v := from; v <= to; v++ {
		w.sweep(&lv.buckets[v%w.slots], t)
	}
}

// sweep empties b: timers due at t go to w.due, stopped ones are dropped, the
// rest are placed again, into a finer level than b's. Called with mu held.
func (w *Wheel) sweep(b *bucket, t int64) {
	for tm := b.take(); tm != nil; {
		next := detach(tm)
		switch {
		case tm.state.Load() != statePending:
			// Stopped between its CAS and taking mu; Stop finds it unlinked.
		case tm.when <= t:
			w.due = append(w.due, tm)
		default:
			w.place(tm)
		}
		tm = next
	}
}

// fire runs the collected callbacks in (deadline, Add order). A timer stopped
// after collection loses the CAS and is skipped. Called with advanceMu held.
func (w *Wheel) fire() {
	if len(w.due) > 1 {
		slices.SortFunc(w.due, func(a, b *Timer) int {
			if c := cmp.Compare(a.when, b.when); c != 0 {
				return c
			}
			return cmp.Compare(a.seq, b.seq)
		})
	}
	for i, t := range w.due {
		w.due[i] = nil
		if t.state.CompareAndSwap(statePending, stateFired) {
			w.pending.Add(-1)
			t.fn()
		}
	}
	w.due = w.due[:0]
}
