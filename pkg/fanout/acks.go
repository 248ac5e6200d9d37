package fanout

import (
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/acks"
	"github.com/fanout/fanout/pkg/batcher"
)

// Ack-waiting Submits are ops of package acks: the ledger resolves them from
// the batchers' fates, the purgatory completes them. This file maps the node's words
// onto the package's: a batcher's Fate onto an acks.Fate, an acks.State onto the API's
// PeerAckState, and an AckPolicy onto the number of peers it needs.

// ackKey names what an ack-waiting Submit watches: one task_id at one peer (its
// address).
type ackKey = acks.Key[string]

// ackFinal is the batchers' OnFinal hook: task left peer's batcher for good with
// fate. It runs on the batcher's acceptor goroutine, so it only takes short locks;
// with nobody waiting it costs one atomic load.
func (n *Node) ackFinal(peer string, t *batcher.Task[wire.Outgoing], fate batcher.Fate) {
	if n.ledger.Waiting() == 0 || fate == batcher.FateOverridden { // the replacement reports
		return
	}
	k := ackKey{Peer: peer, Key: t.ID}
	if n.ledger.Settle(k, t.Value.Version, ackFate(fate)) {
		n.purg.CheckAndComplete(k)
	}
}

// ackFate is what a batcher's fate says of one event at a peer: OK or STALE
// acknowledges (a coalesced-away older version is acknowledged by its replacement),
// a permanent error fails the peer, an overflow, expiry or removal drops it.
func ackFate(f batcher.Fate) acks.Fate {
	switch f {
	case batcher.FateSucceeded, batcher.FateStale:
		return acks.Fate{State: acks.Acked}
	case batcher.FatePermanent:
		return acks.Fate{State: acks.Failed, Detail: "permanent error from peer"}
	}
	return acks.Fate{State: acks.Dropped, Detail: dropReason(f)}
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

// peerAckState is s as the API's PeerAckState.
func peerAckState(s acks.State) fanoutv1.PeerAckState {
	switch s {
	case acks.Acked:
		return fanoutv1.PeerAckState_PEER_ACK_STATE_ACKED
	case acks.Failed:
		return fanoutv1.PeerAckState_PEER_ACK_STATE_FAILED
	case acks.Dropped:
		return fanoutv1.PeerAckState_PEER_ACK_STATE_DROPPED
	}
	return fanoutv1.PeerAckState_PEER_ACK_STATE_PENDING
}

// ackResult is op's PeerAck list and whether the policy was met. Call after Done.
func ackResult(op *acks.Op) ([]wire.PeerAck, bool) {
	peers, satisfied, expired := op.Result()
	out := make([]wire.PeerAck, len(peers))
	for i, p := range peers {
		out[i] = wire.PeerAck{Peer: p.Name, State: int32(peerAckState(p.State)), Detail: p.Detail}
		if p.State == acks.Pending && expired {
			out[i].Detail = "ack_timeout passed before the peer acknowledged"
		}
	}
	return out, satisfied
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
