package timingwheel

import (
	"sync/atomic"
	"time"
)

// Timer states. A Timer leaves statePending exactly once, by a compare-and-swap
// won either by Stop (stateStopped) or by Advance just before it calls the
// callback (stateFired). The winner decrements Wheel.pending.
const (
	statePending int32 = iota
	stateFired
	stateStopped
)

// Timer is one scheduled callback. It is also the node of the intrusive bucket
// list that holds it, so Add and Stop never allocate beyond the Timer itself
// and unlink in O(1).
type Timer struct {
	// next and prev are guarded by w.mu. They are nil when the timer is in no
	// bucket (collected for firing, or stopped); a linked timer needs no
	// pointer to its bucket, since the list is circular around a sentinel.
	next, prev *Timer

	when int64  // deadline in ns since Config.Start; set by Add, then immutable
	seq  uint64 // Add order, breaks ties between equal deadlines; immutable
	fn   func() // immutable; called at most once, outside w.mu
	w    *Wheel // immutable

	state atomic.Int32 // statePending, stateFired or stateStopped
}

// Stop prevents the callback from running. It returns true if it did so, and
// false if the callback has already run or started, or the timer was already
// stopped. Stop may be called from any goroutine, including from inside any
// callback of the same wheel (its own included: it then returns false).
func (t *Timer) Stop() bool {
	if !t.state.CompareAndSwap(statePending, stateStopped) {
		return false
	}
	t.w.pending.Add(-1)
	t.w.mu.Lock()
	if t.next != nil { // otherwise Advance has already collected it and will skip it
		unlink(t)
	}
	t.w.mu.Unlock()
	return true
}

// Deadline returns the time at or after which the callback runs.
func (t *Timer) Deadline() time.Time {
	return t.w.start.Add(time.Duration(t.when))
}

// bucket is a circular doubly linked list of timers around a sentinel, root:
// root.next is the first timer, root.prev the last. Guarded by Wheel.mu.
type bucket struct {
	root Timer
}

func (b *bucket) init() {
	b.root.next, b.root.prev = &b.root, &b.root
}

func (b *bucket) empty() bool { return b.root.next == &b.root }

func (b *bucket) push(t *Timer) {
	last := b.root.prev
	t.prev, t.next = last, &b.root
	last.next = t
	b.root.prev = t
}

// unlink removes t from the bucket holding it.
func unlink(t *Timer) {
	t.prev.next = t.next
	t.next.prev = t.prev
	t.next, t.prev = nil, nil
}

// take empties b and returns its former timers as a nil-terminated chain
// linked by next. The caller must unlink each (see detach) before reusing it.
func (b *bucket) take() *Timer {
	if b.empty() {
		return nil
	}
	first := b.root.next
	b.root.prev.next = nil
	b.init()
	return first
}

// detach clears t's links and returns the timer that followed it in a chain
// returned by take.
func detach(t *Timer) *Timer {
	next := t.next
	t.next, t.prev = nil, nil
	return next
}
