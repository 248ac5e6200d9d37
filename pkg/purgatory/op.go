package purgatory

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/fanout/fanout/pkg/timingwheel"
)

// DelayedOperation is an operation that waits in a Purgatory until it can
// complete or its deadline passes. Implementations embed Op, call Op.Init,
// and supply the three methods of Kafka's DelayedOperation.
type DelayedOperation interface {
	// TryComplete checks whether the operation can complete now. If it can,
	// it calls ForceComplete and returns its result; otherwise it returns
	// false. The purgatory never runs two TryComplete calls of one operation
	// at once (it holds the Op's lock), but other goroutines may call
	// ForceComplete meanwhile.
	TryComplete() bool
	// OnComplete does the operation's work (for fanout, answering Submit). It
	// is called exactly once, by whichever goroutine won ForceComplete or the
	// expiry: user code in TryComplete or elsewhere, or the timing wheel's
	// driver. It must be short and must not block.
	OnComplete()
	// OnExpiration is called when the deadline completed the operation, just
	// before OnComplete and on the same goroutine, so OnComplete can report
	// the timeout. (Kafka calls it after onComplete.)
	OnExpiration()

	base() *Op
}

// Op is the part of a delayed operation the purgatory manages: the
// exactly-once completion flag, the deadline and its timer, and the keys the
// operation is watched under. Embed it by value and call Init before use.
type Op struct {
	self     DelayedOperation // the operation embedding this Op; set by Init
	deadline time.Time        // set by Init

	completed atomic.Bool // set once, by the winner of ForceComplete, expiry or Cancel
	// mu serializes the purgatory's calls to self.TryComplete (Kafka's
	// safeTryComplete).
	mu sync.Mutex

	// timer is the expiry timer, published after scheduling; owner is the
	// purgatory that scheduled it, told when the timer stops or fires. owner
	// is written before timer is published, once, by TryCompleteElseWatch.
	timer atomic.Pointer[timingwheel.Timer]
	owner owner

	// keys is the []K the operation is watched under, for Cancel. Written by
	// TryCompleteElseWatch before the op is visible to others; then read-only.
	keys any
	used atomic.Bool // set by TryCompleteElseWatch, which accepts an Op once
}

func (o *Op) base() *Op { return o }

// Init binds o to self, the operation embedding it, and sets its deadline.
// Call it once, before passing self to a Purgatory or calling ForceComplete.
func (o *Op) Init(self DelayedOperation, deadline time.Time) {
	o.self, o.deadline = self, deadline
}

// Deadline returns the deadline set by Init.
func (o *Op) Deadline() time.Time { return o.deadline }

// IsCompleted reports whether the operation has completed (or was cancelled).
func (o *Op) IsCompleted() bool { return o.completed.Load() }

// ForceComplete completes the operation if nobody has yet: it stops the
// expiry timer, calls OnComplete and returns true. Every later call, and
// every call that loses a race with another ForceComplete, the expiry or
// Cancel, returns false and does nothing. The operation stays in its watch
// lists until a CheckAndComplete of its key or a purge sweeps it out; use
// Purgatory.Cancel to remove it at once.
func (o *Op) ForceComplete() bool {
	if !o.completed.CompareAndSwap(false, true) {
		return false
	}
	o.stopTimer()
	o.self.OnComplete()
	return true
}

// expire is the timer's callback: it completes the operation on behalf of
// the deadline, calling OnExpiration then OnComplete, unless it lost the race.
func (o *Op) expire() {
	o.owner.timerDone()
	if o.completed.CompareAndSwap(false, true) {
		o.self.OnExpiration()
		o.self.OnComplete()
	}
	o.owner.maybePurge()
}

// owner is the purgatory's side of an Op's timer.
type owner interface {
	timerDone()  // the timer fired or was stopped: one operation less delayed
	maybePurge() // an operation completed: sweep if enough have piled up
}

// stopTimer stops the expiry timer if it was scheduled and has not fired.
// Stop returns true at most once, so timerDone is called at most once.
func (o *Op) stopTimer() {
	if t := o.timer.Load(); t != nil && t.Stop() {
		o.owner.timerDone()
	}
}

// tryComplete calls TryComplete under o.mu.
func (o *Op) tryComplete() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.self.TryComplete()
}
