package acks

import (
	"cmp"
	"sync"
	"sync/atomic"

	"github.com/fanout/fanout/pkg/purgatory"
)

// State is where one peer stands in an Op.
type State uint8

const (
	// Pending: the peer has not acknowledged every key of the op, and nothing has
	// decided it otherwise yet.
	Pending State = iota
	// Acked: the peer acknowledged every key of the op, each at its version or newer.
	Acked
	// Failed: the peer cannot acknowledge (a permanent error, or it was unreachable
	// before anything was sent).
	Failed
	// Dropped: a key of the op was dropped on its way to the peer (overflow, expiry,
	// removal of the peer...).
	Dropped
)

func (s State) String() string {
	switch s {
	case Pending:
		return "pending"
	case Acked:
		return "acked"
	case Failed:
		return "failed"
	case Dropped:
		return "dropped"
	}
	return "unknown"
}

// Fate is what became of one key's version at one peer, as the caller maps its
// transport's outcomes: State Acked acknowledges it (the peer took it, or had it or
// newer already), Failed or Dropped decide the peer with Detail as the reason.
// Pending is not a fate.
type Fate struct {
	State  State
	Detail string
}

// Key names what a waiter watches: one key at one peer. The purgatory that watches
// the ops is keyed by it too.
type Key[K comparable] struct {
	Peer string
	Key  K
}

// Ledger resolves waiting ops from the fates of their keys at each peer. For each
// (peer, key) that some op waits on, it keeps the waiters and the version each needs.
// A fate of version v at a peer settles every waiter there that needs v or older: an
// older version coalesced away by its replacement is acknowledged by the
// replacement's acknowledgement. Waiters are registered before their keys are sent,
// so no fate can slip by unseen.
//
// The ledger owns what has been acknowledged; the purgatory, watching each op under
// the same Keys, owns completion (exactly once), the deadline and cancellation.
type Ledger[K comparable, V cmp.Ordered] struct {
	// waiting is len(waiters), written under mu: Waiting lets a fate skip the lock
	// when nobody waits.
	waiting atomic.Int64

	mu sync.Mutex
	// waiters are the registered waiters of each Key, guarded by mu. Invariant: no
	// Key maps to an empty slice; every waiter's op has its peer Pending at
	// registration and holds the waiter's Key among those Register returned.
	waiters map[Key[K]][]waiter[V]
}

type waiter[V cmp.Ordered] struct {
	op      *Op
	peer    int // index into op.peers
	version V   // the version the op needs at least
}

// NewLedger returns an empty ledger.
func NewLedger[K comparable, V cmp.Ordered]() *Ledger[K, V] {
	return &Ledger[K, V]{waiters: make(map[Key[K]][]waiter[V])}
}

// Waiting is the number of Keys some op waits on: 0 lets a caller skip Settle.
func (l *Ledger[K, V]) Waiting() int { return int(l.waiting.Load()) }

// Register adds op's waiters: for each of op's peers still Pending, one per item
// 0..items-1, under the Key of that peer and the item's key, needing the item's
// version. It returns the Keys, for the purgatory and Unregister.
func (l *Ledger[K, V]) Register(op *Op, items int, item func(i int) (K, V)) []Key[K] {
	op.mu.Lock()
	pending := make([]bool, len(op.peers))
	for i := range op.peers {
		pending[i] = op.states[i] == Pending
	}
	op.mu.Unlock()
	keys := make([]Key[K], 0, len(op.peers)*items)
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, name := range op.peers {
		if !pending[p] {
			continue
		}
		for i := range items {
			k, v := item(i)
			key := Key[K]{Peer: name, Key: k}
			l.waiters[key] = append(l.waiters[key], waiter[V]{op: op, peer: p, version: v})
			keys = append(keys, key)
		}
	}
	l.waiting.Store(int64(len(l.waiters)))
	return keys
}

// Unregister removes whatever is left of op's waiters under keys (op completed or was
// cancelled).
func (l *Ledger[K, V]) Unregister(op *Op, keys []Key[K]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		ws := l.waiters[k]
		kept := ws[:0]
		for _, w := range ws {
			if w.op != op {
				kept = append(kept, w)
			}
		}
		clear(ws[len(kept):])
		l.set(k, kept)
	}
	l.waiting.Store(int64(len(l.waiters)))
}

// set keeps the invariant: an empty list is no entry.
func (l *Ledger[K, V]) set(k Key[K], ws []waiter[V]) {
	if len(ws) == 0 {
		delete(l.waiters, k)
		return
	}
	l.waiters[k] = ws
}

// Settle resolves the waiters of k that need version or older with fate, and reports
// whether any were resolved: then the caller asks the purgatory to check k's ops
// (Purgatory.CheckAndComplete). It takes short locks only, so a transport may call it
// from the goroutine that learns the fate.
func (l *Ledger[K, V]) Settle(k Key[K], version V, fate Fate) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ws, ok := l.waiters[k]
	if !ok {
		return false
	}
	kept := ws[:0]
	for _, w := range ws {
		if w.version > version {
			kept = append(kept, w)
			continue
		}
		w.op.resolve(w.peer, fate)
	}
	resolved := len(kept) < len(ws)
	clear(ws[len(kept):])
	l.set(k, kept)
	l.waiting.Store(int64(len(l.waiters)))
	return resolved
}

// Op is one operation waiting for acknowledgements of its keys from its peers: a
// delayed operation in the purgatory. Each peer's State moves from Pending to Acked
// (every key acknowledged), Failed or Dropped, once; the op completes once Need peers
// are Acked, once that can no longer happen, or at its deadline.
type Op struct {
	purgatory.Op
	peers []string // the peers' names, in the caller's order; read-only
	need  int      // peers that must be Acked; read-only
	done  chan struct{}

	mu sync.Mutex
	// states, details and remaining have one entry per peer; guarded by mu.
	// Invariant: a state leaves Pending at most once; details[i] is set with it.
	states  []State
	details []string
	// remaining counts the keys not yet acknowledged per peer. Invariant:
	// 0 <= remaining[i] <= the op's keys, and states[i] == Acked implies
	// remaining[i] == 0.
	remaining []int
	// acked counts the peers in Acked, undecided those in Pending. Invariant:
	// acked + undecided <= len(peers).
	acked, undecided int
	expired          bool // the deadline completed the op
}

// NewOp returns an op over peers that completes once need of them acknowledged each
// of keys keys. Call Init (purgatory.Op) with it and its deadline before the
// purgatory sees it.
func NewOp(peers []string, need, keys int) *Op {
	op := &Op{peers: peers, need: need, done: make(chan struct{}), undecided: len(peers),
		states: make([]State, len(peers)), details: make([]string, len(peers)), remaining: make([]int, len(peers))}
	for i := range op.remaining {
		op.remaining[i] = keys
	}
	return op
}

// decide moves peer i out of Pending. Caller holds mu.
func (op *Op) decide(i int, s State, detail string) {
	if op.states[i] != Pending {
		return
	}
	op.states[i], op.details[i] = s, detail
	op.undecided--
	if s == Acked {
		op.acked++
	}
}

// Fail marks peer i Failed before anything is sent (its breaker is open, say): no
// waiter is registered for it then.
func (op *Op) Fail(i int, detail string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.decide(i, Failed, detail)
}

// resolve applies one key's fate at peer i.
func (op *Op) resolve(i int, f Fate) {
	op.mu.Lock()
	defer op.mu.Unlock()
	if f.State == Acked {
		if op.remaining[i] > 0 {
			op.remaining[i]--
		}
		if op.remaining[i] == 0 {
			op.decide(i, Acked, f.Detail)
		}
		return
	}
	op.decide(i, f.State, f.Detail)
}

// TryComplete completes the op once Need peers are Acked or that can no longer
// happen (purgatory.DelayedOperation).
func (op *Op) TryComplete() bool {
	op.mu.Lock()
	decided := op.acked >= op.need || op.acked+op.undecided < op.need
	op.mu.Unlock()
	return decided && op.ForceComplete()
}

// OnExpiration records that the deadline ended the wait.
func (op *Op) OnExpiration() {
	op.mu.Lock()
	op.expired = true
	op.mu.Unlock()
}

// OnComplete wakes the waiter of Done.
func (op *Op) OnComplete() { close(op.done) }

// Done is closed once the op has completed.
func (op *Op) Done() <-chan struct{} { return op.done }

// Peer is one peer's outcome in an op.
type Peer struct {
	Name   string
	State  State
	Detail string
}

// Result is each peer's outcome, in the order of NewOp's peers, whether Need peers
// acknowledged, and whether the deadline ended the wait (then the peers still
// Pending did not answer in time). Call it after Done.
func (op *Op) Result() (peers []Peer, satisfied, expired bool) {
	op.mu.Lock()
	defer op.mu.Unlock()
	peers = make([]Peer, len(op.peers))
	for i, name := range op.peers {
		peers[i] = Peer{Name: name, State: op.states[i], Detail: op.details[i]}
	}
	return peers, op.acked >= op.need, op.expired
}
