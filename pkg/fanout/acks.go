package fanout

import (
	"sync"
	"sync/atomic"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/batcher"
	"github.com/fanout/fanout/pkg/purgatory"
)

// ackKey names what an ack-waiting Submit watches: one task at one peer.
type ackKey struct {
	peer string // the peer's address
	task string
}

// ackLedger resolves waiting Submits from the batchers' fates (SPEC §7). For each
// (peer, task_id) that some Submit waits on, it keeps the waiters and the version each
// needs. A fate of version V at a peer settles every waiter there that needs V or
// older: OK or STALE acknowledges (a coalesced-away older version is acknowledged by
// its replacement), overflow / expiry / removal drops, a permanent error fails, and
// "overridden" settles nothing (the replacement reports). Waiters register before the
// events are offered, so no fate can slip by unseen.
//
// The ledger owns what has been acknowledged; the purgatory, watching each operation
// under the same keys, owns completion (exactly once), the deadline and cancellation.
type ackLedger struct {
	purg    *purgatory.Purgatory[ackKey]
	waiting atomic.Int64 // len(waiters): lets fates skip the lock when nobody waits

	mu      sync.Mutex
	waiters map[ackKey][]ackWaiter // guarded by mu
}

type ackWaiter struct {
	op      *ackOp
	peer    int    // index into op.peers
	version uint64 // the version this Submit sent
}

func newAckLedger(purg *purgatory.Purgatory[ackKey]) *ackLedger {
	return &ackLedger{purg: purg, waiters: make(map[ackKey][]ackWaiter)}
}

// register adds op's waiters, one per (peer, task) of peers that can still answer.
func (l *ackLedger) register(op *ackOp, tasks []batcher.Task[wire.Outgoing]) []ackKey {
	keys := make([]ackKey, 0, len(op.peers)*len(tasks))
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, p := range op.peers {
		if op.acks[i].State != fanoutv1.PeerAckState_PEER_ACK_STATE_PENDING {
			continue
		}
		for _, t := range tasks {
			k := ackKey{peer: p, task: t.ID}
			l.waiters[k] = append(l.waiters[k], ackWaiter{op: op, peer: i, version: t.Value.Version})
			keys = append(keys, k)
		}
	}
	l.waiting.Store(int64(len(l.waiters)))
	return keys
}

// unregister removes whatever is left of op's waiters (it completed or was cancelled).
func (l *ackLedger) unregister(op *ackOp, keys []ackKey) {
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
		l.setWaiters(k, kept)
	}
	l.waiting.Store(int64(len(l.waiters)))
}

func (l *ackLedger) setWaiters(k ackKey, ws []ackWaiter) {
	if len(ws) == 0 {
		delete(l.waiters, k)
		return
	}
	l.waiters[k] = ws
}

// final is the batchers' OnFinal hook: task left peer's batcher for good with fate.
// It runs on the batcher's acceptor goroutine, so it only takes short locks.
func (l *ackLedger) final(peer string, t *batcher.Task[wire.Outgoing], fate batcher.Fate) {
	if l.waiting.Load() == 0 || fate == batcher.FateOverridden {
		return
	}
	k := ackKey{peer: peer, task: t.ID}
	if l.settle(k, t.Value.Version, fate) {
		l.purg.CheckAndComplete(k)
	}
}

// settle resolves the waiters of k that need version or older; it reports whether any
// were resolved.
func (l *ackLedger) settle(k ackKey, version uint64, fate batcher.Fate) bool {
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
	l.setWaiters(k, kept)
	l.waiting.Store(int64(len(l.waiters)))
	return resolved
}

// ackOp is one Submit waiting for acknowledgements: a delayed operation in the
// purgatory. Its per-peer state moves from PENDING to ACKED (every event of the request
// acknowledged), FAILED or DROPPED; it completes once the policy is met, once it can no
// longer be met, or at its deadline.
type ackOp struct {
	purgatory.Op
	peers []string // addresses, in GetStatus order
	need  int      // peers that must acknowledge
	done  chan struct{}

	mu        sync.Mutex
	acks      []*fanoutv1.PeerAck // guarded by mu; one per peer
	remaining []int               // guarded by mu; events not yet acknowledged per peer
	acked     int                 // guarded by mu; peers in ACKED
	undecided int                 // guarded by mu; peers still PENDING
	expired   bool                // guarded by mu
}

func newAckOp(peers []string, need, events int) *ackOp {
	op := &ackOp{peers: peers, need: need, done: make(chan struct{}), undecided: len(peers)}
	op.acks = make([]*fanoutv1.PeerAck, len(peers))
	op.remaining = make([]int, len(peers))
	for i, p := range peers {
		op.acks[i] = &fanoutv1.PeerAck{Peer: p, State: fanoutv1.PeerAckState_PEER_ACK_STATE_PENDING}
		op.remaining[i] = events
	}
	return op
}

// decide moves peer i out of PENDING. Caller holds mu.
func (op *ackOp) decide(i int, state fanoutv1.PeerAckState, detail string) {
	if op.acks[i].State != fanoutv1.PeerAckState_PEER_ACK_STATE_PENDING {
		return
	}
	op.acks[i].State, op.acks[i].Detail = state, detail
	op.undecided--
	if state == fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED {
		op.acked++
	}
}

// fail marks peer i FAILED before anything is sent (its breaker is open).
func (op *ackOp) fail(i int, detail string) {
	op.mu.Lock()
	defer op.mu.Unlock()
	op.decide(i, fanoutv1.PeerAckState_PEER_ACK_STATE_FAILED, detail)
}

// resolve applies one event's fate at peer i.
func (op *ackOp) resolve(i int, fate batcher.Fate) {
	op.mu.Lock()
	defer op.mu.Unlock()
	switch fate {
	case batcher.FateSucceeded, batcher.FateStale:
		if op.remaining[i]--; op.remaining[i] == 0 {
			op.decide(i, fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED, "")
		}
	case batcher.FatePermanent:
		op.decide(i, fanoutv1.PeerAckState_PEER_ACK_STATE_FAILED, "permanent error from peer")
	default:
		op.decide(i, fanoutv1.PeerAckState_PEER_ACK_STATE_DROPPED, dropReason(fate))
	}
}

func dropReason(f batcher.Fate) string {
	switch f {
	case batcher.FateOverflow:
		return "overflow: the peer's queue (--max-buffer) was full"
	case batcher.FateExpired:
		return "expired: not sent within its ttl"
	case batcher.FateStopped:
		return "peer removed before the event was sent"
	case batcher.FateTooLarge:
		return "too large: the peer refused the event for its size (its receive limit is below it)"
	}
	return "dropped"
}

// TryComplete completes the operation once the policy is met or can no longer be.
func (op *ackOp) TryComplete() bool {
	op.mu.Lock()
	decided := op.acked >= op.need || op.acked+op.undecided < op.need
	op.mu.Unlock()
	return decided && op.ForceComplete()
}

// OnExpiration records that the deadline ended the wait.
func (op *ackOp) OnExpiration() {
	op.mu.Lock()
	op.expired = true
	op.mu.Unlock()
}

// OnComplete wakes the waiting Submit.
func (op *ackOp) OnComplete() { close(op.done) }

// result is the PeerAck list and whether the policy was met. Call after done.
func (op *ackOp) result() ([]wire.PeerAck, bool) {
	op.mu.Lock()
	defer op.mu.Unlock()
	out := make([]wire.PeerAck, len(op.acks))
	for i, a := range op.acks {
		out[i] = wire.PeerAck{Peer: a.Peer, State: int32(a.State), Detail: a.Detail}
		if a.State == fanoutv1.PeerAckState_PEER_ACK_STATE_PENDING && op.expired {
			out[i].Detail = "ack_timeout passed before the peer acknowledged"
		}
	}
	return out, op.acked >= op.need
}

// needFor is how many of n peers a policy needs.
func needFor(p fanoutv1.AckPolicy, n int) int {
	if n == 0 {
		return 0 // with no peers every policy is satisfied
	}
	switch p {
	case fanoutv1.AckPolicy_ACK_POLICY_ONE:
		return 1
	case fanoutv1.AckPolicy_ACK_POLICY_QUORUM:
		return n/2 + 1
	case fanoutv1.AckPolicy_ACK_POLICY_ALL:
		return n
	}
	return 0
}
