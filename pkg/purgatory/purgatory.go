package purgatory

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/fanout/fanout/pkg/timingwheel"
)

// Purgatory holds delayed operations, watched under keys of type K, until a
// CheckAndComplete of one of their keys completes them or their deadline
// passes. See the package documentation. All methods are safe for
// concurrent use, and may be called from OnComplete and OnExpiration.
type Purgatory[K comparable] struct {
	wheel         *timingwheel.Wheel // Config.Wheel; owned and driven by the caller
	purgeInterval int64              // Config.PurgeInterval; immutable

	delayed   atomic.Int64 // operations whose expiry timer is pending
	estimated atomic.Int64 // operations watched since the last purge, completed or not (Kafka's estimatedTotalOperations)
	watched   atomic.Int64 // (key, operation) entries in watchers; changed under mu
	purging   atomic.Bool  // a purge is running; others skip theirs

	mu       sync.Mutex
	watchers map[K][]*Op // a key's operations in watch order; a key with no operations is deleted
	peakKeys int         // len(watchers) high-water mark since the map was last rebuilt; guarded by mu
}

var _ owner = (*Purgatory[int])(nil)

// New returns an empty purgatory.
func New[K comparable](cfg Config) (*Purgatory[K], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Purgatory[K]{
		wheel:         cfg.Wheel,
		purgeInterval: int64(cfg.PurgeInterval),
		watchers:      make(map[K][]*Op),
	}, nil
}

// TryCompleteElseWatch tries to complete op. If it cannot, it watches op
// under each of keys and schedules op's deadline on the wheel, so that the
// first of CheckAndComplete (of any of the keys), ForceComplete, Cancel and
// the deadline completes it. It returns true if op completed during the call
// (by this call's TryComplete), false if it is left waiting (or was completed
// meanwhile by someone else).
//
// Like Kafka it tries again after watching: a key's state may change, and its
// CheckAndComplete run, between the first try and the watch, and the second
// try sees that change. op must have been Init'ed and is accepted once; keys
// may be empty (then only the deadline, ForceComplete or Cancel end it).
func (p *Purgatory[K]) TryCompleteElseWatch(op DelayedOperation, keys []K) bool {
	o := op.base()
	if o.self == nil {
		panic("purgatory: Op.Init was not called")
	}
	if !o.used.CompareAndSwap(false, true) {
		panic("purgatory: operation passed to TryCompleteElseWatch twice")
	}
	if o.tryComplete() {
		return true
	}
	o.keys = slices.Clone(keys)
	if !p.watch(o, keys) {
		return false
	}
	if o.tryComplete() {
		return true
	}
	p.schedule(o)
	p.maybePurge()
	return false
}

// watch adds o to the list of each key. It returns false, watching nothing,
// if o completed meanwhile.
func (p *Purgatory[K]) watch(o *Op, keys []K) bool {
	if o.IsCompleted() {
		return false
	}
	if len(keys) == 0 {
		return true
	}
	p.mu.Lock()
	for _, k := range keys {
		p.watchers[k] = append(p.watchers[k], o)
	}
	p.peakKeys = max(p.peakKeys, len(p.watchers))
	p.mu.Unlock()
	p.watched.Add(int64(len(keys)))
	p.estimated.Add(1)
	return true
}

// schedule puts o's deadline on the wheel. If o completes while the timer is
// being published, whoever completed it may have missed the timer, so it is
// stopped here (ForceComplete and expiry agree through o.completed).
func (p *Purgatory[K]) schedule(o *Op) {
	if o.IsCompleted() {
		return
	}
	o.owner = p
	p.delayed.Add(1)
	o.timer.Store(p.wheel.Add(o.deadline, o.expire))
	if o.IsCompleted() {
		o.stopTimer()
	}
}

// CheckAndComplete tries to complete every uncompleted operation watched
// under key, removes the completed ones from key's list (and key, if its list
// empties), and returns how many this call completed. An operation it completes
// also leaves its other keys' lists at once (ours: Kafka leaves them to the purge,
// which counts operations, so an operation watched under thousands of keys, a
// Submit of thousands of events, would pin thousands of entries per operation
// until then). Call it when something an operation of key waits for has changed
// (for fanout: an ack arrived).
func (p *Purgatory[K]) CheckAndComplete(key K) int {
	p.mu.Lock()
	ops := slices.Clone(p.watchers[key]) // TryComplete runs user code: not under mu
	p.mu.Unlock()
	if len(ops) == 0 {
		return 0
	}
	var done []*Op
	for _, o := range ops {
		if !o.IsCompleted() && o.tryComplete() {
			done = append(done, o)
		}
	}
	p.mu.Lock()
	p.sweepKey(key)
	for _, o := range done {
		keys, _ := o.keys.([]K)
		for _, k := range keys {
			if k != key {
				p.sweepKey(k)
			}
		}
	}
	p.mu.Unlock()
	p.maybePurge()
	return len(done)
}

// Cancel abandons op, for a caller that no longer waits for it (a cancelled
// client call): if op has not completed, it is marked completed without
// calling OnComplete or OnExpiration, and Cancel returns true. Either way its
// timer is stopped and it is removed from its watch lists at once. Call it
// after TryCompleteElseWatch has returned.
func (p *Purgatory[K]) Cancel(op DelayedOperation) bool {
	o := op.base()
	won := o.completed.CompareAndSwap(false, true)
	o.stopTimer()
	keys, _ := o.keys.([]K)
	if len(keys) == 0 {
		return won
	}
	p.mu.Lock()
	for _, k := range keys {
		p.sweepKey(k)
	}
	p.mu.Unlock()
	return won
}

// Watched returns the number of (key, operation) watch entries, completed
// operations not yet swept included (Kafka's "watched" gauge: an operation
// watched under three keys counts three times).
func (p *Purgatory[K]) Watched() int { return int(p.watched.Load()) }

// Delayed returns the number of operations whose deadline is still pending on
// the wheel (Kafka's "delayed" gauge).
func (p *Purgatory[K]) Delayed() int { return int(p.delayed.Load()) }

// Keys returns the number of keys with a watch list.
func (p *Purgatory[K]) Keys() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watchers)
}

func (p *Purgatory[K]) timerDone() { p.delayed.Add(-1) }

// maybePurge sweeps every watch list once more than PurgeInterval completed
// operations may be lying in them: the operations watched since the last
// purge minus those still delayed estimates that number, as in Kafka. One
// goroutine purges at a time; the others go on.
func (p *Purgatory[K]) maybePurge() {
	if p.estimated.Load()-p.delayed.Load() <= p.purgeInterval {
		return
	}
	if !p.purging.CompareAndSwap(false, true) {
		return
	}
	defer p.purging.Store(false)
	p.estimated.Store(p.delayed.Load())
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.watchers {
		p.sweepKey(k)
	}
	p.maybeShrink()
}

// sweepKey removes completed operations from key's list, and key if its list
// empties. Called with mu held.
func (p *Purgatory[K]) sweepKey(key K) {
	ops, ok := p.watchers[key]
	if !ok {
		return
	}
	kept := slices.DeleteFunc(ops, (*Op).IsCompleted) // zeroes the tail for the GC
	p.watched.Add(int64(len(kept) - len(ops)))
	if len(kept) == 0 {
		delete(p.watchers, key)
		return
	}
	p.watchers[key] = kept
}

// maybeShrink rebuilds the watchers map once it holds under a quarter of its
// peak number of keys: a Go map never gives back the memory of deleted keys,
// so a burst of distinct keys would otherwise pin it. Called with mu held.
func (p *Purgatory[K]) maybeShrink() {
	const minPeak = 1024 // small maps are not worth rebuilding
	if p.peakKeys < minPeak || len(p.watchers) >= p.peakKeys/4 {
		return
	}
	m := make(map[K][]*Op, len(p.watchers))
	for k, v := range p.watchers {
		m[k] = v
	}
	p.watchers, p.peakKeys = m, len(m)
}
