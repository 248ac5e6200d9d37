package mesh

import (
	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Status is the mesh's kind and its peers: those in the set and those still
// leaving it, the rows of Peers.
func (m *Mesh) Status() *fanoutv1.TransportStatus {
	return &fanoutv1.TransportStatus{Kind: "mesh", Peers: uint64(len(m.allLinks()))}
}

// Peers reports every peer in the set, then those still leaving it: one GetStatus row
// each.
func (m *Mesh) Peers() []*fanoutv1.PeerStatus {
	links := m.allLinks()
	out := make([]*fanoutv1.PeerStatus, 0, len(links))
	for _, l := range links {
		out = append(out, l.status())
	}
	return out
}

func (l *link) status() *fanoutv1.PeerStatus {
	st := l.b.Stats()
	up, changed := l.state.get()
	var upChanged *timestamppb.Timestamp
	if !changed.IsZero() {
		upChanged = timestamppb.New(changed)
	}
	return &fanoutv1.PeerStatus{
		Up:             up,
		UpChangedAt:    upChanged,
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
