package batcher

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/fanout/fanout/pkg/configerr"
)

// Budget is one node's memory budget over the pending tasks of all its batchers
// together (ours; Eureka bounds each peer alone). MaxBufferBytes bounds one peer;
// with many peers, that bound times the peers is no bound at all: 300 dead peers of
// 10,000 small events each held 2.67 million tasks. A Budget bounds the sum.
//
// Each batcher made with Config.Budget holds an account in it, charged with its
// pending tasks: each task's size (Config.Size) plus taskOverhead, what its holder
// and index slots cost. A task's bytes are shared by every peer it is offered to, so
// the charge counts them once per peer: the bound is conservative.
//
// The rule, applied by each batcher's acceptor to its own pending, which it alone
// owns: while the batchers together hold more than Limit, a batcher holding more
// than its share (Limit over the batchers) evicts its oldest pending tasks
// (FateOverflow, counted in Stats.BudgetEvicted) down to its share, or until the
// total is within Limit. A batcher that is not sending (its last batch failed to
// reach the peer, or its dispatch is held: the breaker is open, or it is paused
// after a failure) applies the same rule to half of Limit. So:
//   - a batcher within its share always gets room for an arrival (one with nothing
//     pending gets room for one task whatever its size): the batchers over their
//     share make that room, at their next step. The budget wakes them (Offer steps
//     every batcher anyway, since every Submit is offered to every peer);
//   - the peers that are down keep to half the budget between them, each to about
//     its share of that half, losing their oldest tasks first; the peers that are
//     sending have the other half for bursts bigger than their share (a Submit of
//     thousands of events is accepted whole before the first batch leaves).
//
// So one dead peer, or 297, cannot starve the live ones. Anti-entropy repairs what
// is dropped.
//
// Invariants. used is the sum of the accounts' charged (each account adds its own
// changes once per acceptor step, and each eviction of shed at once). Batchers over
// their share grow only while used stays within Limit, and those within it hold at
// most Limit together, so used <= 2*Limit at any moment, and used <= Limit + one
// task per account once every batcher over its share has taken a step.
type Budget struct {
	limit int // fixed by NewBudget; > 0

	used    atomic.Int64  // sum of the accounts' charged
	evicted atomic.Uint64 // tasks evicted or refused for the budget, by every batcher so far
	n       atomic.Int64  // len(accounts), read by share without the lock
	// nudgedAt is when nudge last scanned the accounts (unix nanos).
	nudgedAt atomic.Int64

	mu       sync.Mutex
	accounts map[*account]struct{} // guarded by mu
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int) (*Budget, error) {
	if limit <= 0 {
		return nil, configerr.New("batcher.Budget.Limit", "must be > 0, got %d", limit)
	}
	return &Budget{limit: limit, accounts: make(map[*account]struct{})}, nil
}

// BudgetStats is a snapshot of a Budget.
type BudgetStats struct {
	// Limit is the budget in bytes; Used what the batchers hold now (it may pass
	// Limit for a moment, see Budget); Accounts the batchers that share it.
	Limit, Used int64
	Accounts    int
	// Evicted counts the tasks evicted or refused for the budget since it was made,
	// by every batcher, closed ones included.
	Evicted uint64
}

// Stats returns the budget's state; safe from any goroutine.
func (b *Budget) Stats() BudgetStats {
	return BudgetStats{Limit: int64(b.limit), Used: b.used.Load(), Accounts: int(b.n.Load()), Evicted: b.evicted.Load()}
}

// account is one batcher's part of a Budget. charged is written by the batcher's
// acceptor only (by Close once it has exited); wake by anyone.
type account struct {
	b       *Budget
	charged atomic.Int64  // what this account has added to b.used
	wake    chan struct{} // cap 1: the budget asks the batcher to shed
}

// open adds an account; nil for a nil budget.
func (b *Budget) open() *account {
	if b == nil {
		return nil
	}
	a := &account{b: b, wake: make(chan struct{}, 1)}
	b.mu.Lock()
	b.accounts[a] = struct{}{}
	b.n.Store(int64(len(b.accounts)))
	b.mu.Unlock()
	return a
}

// close removes a, which must hold nothing any more.
func (b *Budget) close(a *account) {
	b.mu.Lock()
	delete(b.accounts, a)
	b.n.Store(int64(len(b.accounts)))
	b.mu.Unlock()
}

// members is how many batchers share the budget (at least 1).
func (b *Budget) members() int { return max(int(b.n.Load()), 1) }

// nudgeEvery spaces the nudges: while the budget is over half its limit, every
// charge would nudge, and each nudge scans the accounts (2 µs for 300). Every Submit
// steps every batcher anyway; a nudge only makes the ones that get no offers (peers
// leaving the set) and a quiet node shed, for which 100ms is soon enough.
const nudgeEvery = 100 * time.Millisecond

// nudge wakes every account over its share of half the limit, so that a held one
// among them sheds at once rather than at its next offer; at most once per
// nudgeEvery (now is the caller's clock). Called when a charge took the budget over
// half its limit.
func (b *Budget) nudge(now time.Time) {
	t, last := now.UnixNano(), b.nudgedAt.Load()
	if t-last < int64(nudgeEvery) && t >= last || !b.nudgedAt.CompareAndSwap(last, t) {
		return
	}
	share := int64(b.limit / 2 / b.members())
	b.mu.Lock()
	defer b.mu.Unlock()
	for a := range b.accounts {
		if a.charged.Load() > share {
			select {
			case a.wake <- struct{}{}:
			default:
			}
		}
	}
}

// taskOverhead is what a pending task costs beside its value's bytes, as the budget
// charges it: its holder and two slots of the index (which keeps at most half its
// slots full).
func taskOverhead[T any]() int {
	return int(unsafe.Sizeof(holder[T]{}) + 2*unsafe.Sizeof(idSlot[T]{}))
}

// TaskOverhead is what the budget charges for a pending task beside its Size: the
// bytes of its holder and index slots. A budget must hold at least one task.
func TaskOverhead[T any]() int { return taskOverhead[T]() }
