package fanout

import (
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// Status reports this node and every peer: gauges and counters (SPEC §3 GetStatus).
func (n *Node) Status() *fanoutv1.GetStatusResponse {
	links := n.allLinks()
	resp := &fanoutv1.GetStatusResponse{
		NodeId:      n.cfg.NodeID,
		Peers:       make([]*fanoutv1.PeerStatus, 0, len(links)),
		Subscribers: uint64(n.subscribers.Load()),
		Delivered:   n.delivered.Load(),
		State:       n.stateStatus(),
	}
	resp.Ready, resp.ReadyReason = n.Readiness()
	for _, l := range links {
		resp.Peers = append(resp.Peers, l.status())
	}
	return resp
}

func (l *link) status() *fanoutv1.PeerStatus {
	st := l.b.Stats()
	return &fanoutv1.PeerStatus{
		Address:        l.addr,
		NodeId:         l.peerNodeID(),
		Breaker:        l.br.State().String(),
		Pending:        st.Pending,
		InFlight:       st.InFlight,
		Accepted:       st.Accepted,
		Overridden:     st.Overridden,
		Overflow:       st.Overflow,
		Expired:        st.Expired,
		Replayed:       st.Replayed,
		Succeeded:      st.Succeeded,
		Congestion:     st.Congestion,
		Transient:      st.Transient,
		Permanent:      st.Permanent,
		Stale:          st.Stale,
		TooLarge:       st.TooLarge,
		PendingBytes:   st.PendingBytes,
		AcceptorQueue:  st.AcceptorQueue,
		ReprocessQueue: st.ReprocessQueue,
		IdleWorkers:    st.IdleWorkers,
		Sync:           l.sync.status(),
		LastError:      l.err.status(),
		Removing:       l.removing.Load(),
		NodeIdConflict: l.conflictText(),
	}
}

func (n *Node) stateStatus() *fanoutv1.StateStatus {
	st, bounds := n.table.Stats(), n.table.Config()
	return &fanoutv1.StateStatus{
		Keys:              uint64(st.Keys),
		MaxKeys:           uint64(n.cfg.State.MaxKeys),
		Bytes:             uint64(st.Bytes),
		MaxBytes:          uint64(n.cfg.State.MaxBytes),
		Tombstones:        uint64(st.Tombstones),
		Revision:          st.Revision,
		CompactedRevision: st.Compacted,
		Refused:           st.Refused,
		Stale:             st.StaleSeen,
		Collected:         st.Collected,
		TombstoneBytes:    uint64(st.TombstoneBytes),
		MaxTombstones:     uint64(bounds.MaxTombstones),
		MaxTombstoneBytes: uint64(bounds.MaxTombstoneBytes),
		CollectedEarly:    st.CollectedEarly,
		RefusedPeer:       st.RefusedPeer,
	}
}
