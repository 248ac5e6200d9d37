package fanout

import (
	"fmt"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/state"
)

// Apply stores entries a transport brought from the node from: the receive side of the
// seam (Transport), e.g. anti-entropy's (a Pull's answer, a peer's Push) or a broker's
// feed.
// It validates all of them first, as Replicate validates an event, and refuses the
// whole request naming the first bad one. Unlike Replicate it takes this node's own
// writes of an earlier process: a node restarted without --data-dir gets them back
// from its peers, and its clock moves past them; an entry of this node's origin that
// this process would hold, and does not, is skipped and counted (origin.go).
//
// Entries of an origin other than from (the peer that sent them) and this node are
// relayed: counted in fanout_sync_relayed_entries_total. Anti-entropy relays on
// purpose (docs/SECURITY.md, "Anti-entropy relays"): a restarted or new node gets the
// writes of nodes that are down or gone from the ones that hold them.
func (n *Node) Apply(from string, entries []*fanoutv1.SyncEntry) (int, error) {
	if n.draining.Load() {
		return 0, ErrDraining
	}
	now := n.cfg.Now()
	bound := newVersionBound(now, maxPeerAhead)
	heads := make([]wire.EventHead, len(entries))
	for i, e := range entries {
		h, ok := n.cfg.Limits.ReadEvent(e.GetEvent())
		switch o := e.GetOrigin(); {
		case !ok:
			return 0, invalid(fmt.Sprintf("entries[%d].event", i), "not an event within the limits (SPEC §10)")
		case !bound.allows(h.Version):
			n.versionsRefused.sync.Add(1)
			return 0, invalid(fmt.Sprintf("entries[%d].event.version", i), "%s", bound.explain(h.Version, maxPeerAhead))
		case o == "" || len(o) > MaxNodeIDBytes:
			return 0, invalid(fmt.Sprintf("entries[%d].origin", i), "%d bytes, want 1..%d", len(o), MaxNodeIDBytes)
		}
		heads[i] = h
	}
	applied, relayed := 0, uint64(0)
	src := n.sources.of(from)
	for i, e := range entries {
		h := heads[i]
		o := e.GetOrigin()
		if o != from && o != n.cfg.NodeID {
			relayed++
		}
		n.clock.observe(h.Version) // a refused entry too: this node's next write of the key wins over it
		if o == n.cfg.NodeID && !n.ownSynced(&h, e.GetSubmittedAtUnixNanos(), now) {
			continue
		}
		w := state.Write{Key: h.TaskID, KeyOffset: h.TaskOff, Raw: e.GetEvent(),
			Stamp: state.Stamp{Version: h.Version, Origin: o}, Submitted: e.GetSubmittedAtUnixNanos(), Deleted: h.Deleted}
		r := n.table.Put(&w, now)
		src.count(r)
		if r.Outcome == state.Applied {
			applied++
			if o == n.cfg.NodeID {
				n.own.syncRestored.Add(1)
			}
		}
	}
	n.relayed.Add(relayed)
	return applied, nil
}
