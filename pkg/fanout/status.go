package fanout

import (
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
)

// Status reports this node and every peer: gauges and counters (GetStatus).
func (n *Node) Status() *fanoutv1.GetStatusResponse {
	resp := &fanoutv1.GetStatusResponse{
		NodeId:      n.cfg.NodeID,
		Peers:       n.tr.Peers(),
		Subscribers: uint64(n.subscribers.Load()),
		Delivered:   n.delivered.Load(),
		State:       n.stateStatus(),
		Transport:   n.tr.Status(),
	}
	resp.Ready, resp.ReadyReason = n.Readiness()
	return resp
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
