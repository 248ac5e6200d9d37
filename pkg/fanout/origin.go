package fanout

import (
	"sync/atomic"
	"time"

	fanoutv1 "github.com/fanout/fanout/gen/fanout/v1"
	"github.com/fanout/fanout/internal/wire"
	"github.com/fanout/fanout/pkg/state"
)

// Entries that claim this node's own origin.
//
// Only this node writes as itself, so an entry of its origin that a peer sends
// (Replicate, a Push, a Pull's answer) is one of three things:
//
//   - an echo of a write this process made: the table holds it, or something newer
//     of the key. Nothing to do (STALE).
//   - a write of an earlier process with this node id, before a restart. A node
//     without --data-dir starts empty and gets these back from its peers by
//     bootstrap and anti-entropy; one with --data-dir can lack its last writes after
//     kill -9 (sent to the peers, not yet committed). They are this node's
//     acknowledged writes: refusing them would lose them here while the peers keep
//     them.
//   - a write this node never made, planted by a peer (issue 25: with mutual TLS a
//     valid peer could Push, or relay through another node, an entry "written by"
//     the receiver).
//
// Every write this process made is in its table until something newer of its key
// replaces it. So an entry of this node's origin that would change the table (the
// table holds nothing at or above its stamp) is not this process's, and the rule
// asks whether it can be an earlier process's, with what the entry carries:
//
//   - by Replicate it is refused (INVALID) and counted: a Replicate carries its
//     sender's own writes, and an earlier process of this node is gone.
//   - by anti-entropy it is taken as an earlier process's write, and counted as
//     restored, if (a) its version is below the first version this process could
//     hand out (ownFloor: the clock it started with, after --data-dir's saved
//     mark), or (b) it was submitted before this process started (0 <
//     submitted_at < start) and its version is within this node's clock's reach:
//     at most maxObservedSkew ahead of the wall clock (the clock moves past it) for
//     the sidecar's versions, at most the wall clock for Unix-nanosecond ones.
//     Otherwise it claims to be a write of this process that this process does not
//     hold: refused and counted.
//
// (b) is what a memory-only node restarted with its node id needs: its earlier
// process's versions can be ahead of the new wall clock (its clock followed an app
// version or a peer's clock up to a minute ahead), and refusing them would lose its
// acknowledged writes here while the peers keep them. (a) covers a wall clock set
// back across a restart with --data-dir.
//
// What it does not stop: a peer can plant an entry that claims to be an earlier
// process's write, as a genuine one would. It cannot hold the key against this
// node: the clock moves past its version (or, in nanoseconds, it is not ahead of
// now), so this node's next write of the key, with the sidecar's versions or Unix
// nanoseconds, replaces it everywhere (counters are as open to any peer's write:
// docs/SECURITY.md). An entry refused here stays where peers took it: one up to
// maxPeerAhead (5 minutes) ahead of this node's clock outranks this node's writes of
// its key there until this node's clock passes it, as any peer's own write that far
// ahead would ("Versions and clocks" in docs/SECURITY.md). The price of the rule: an
// earlier process's write submitted after this process's start by the wall clock (a
// clock set back across a memory-only restart), or more than a minute ahead of it,
// is refused here while the peers keep it, until this node writes the key again.
type ownOrigin struct {
	floor ownFloor
	// Entries refused by path, and earlier writes taken by anti-entropy.
	replicateRefused, syncRefused, syncRestored atomic.Uint64
	lastLog                                     atomic.Int64 // unix nanos of the last WARN line
}

// ownFloor is where this process started: the first version it could hand out
// (hlc.go), and its start time.
type ownFloor struct {
	clock uint64
	start int64 // unix nanos
}

// newOwnFloor is the floor of a process started at start whose clock holds last
// (the --data-dir mark, or 0).
func newOwnFloor(start time.Time, last uint64) ownFloor {
	return ownFloor{clock: max(wallVersion(start), last+1), start: start.UnixNano()}
}

// earlier reports whether an entry of this node's origin at version v, submitted
// at submitted, can be an earlier process's write at now: (a) or (b) of the rule.
func (f ownFloor) earlier(v uint64, submitted int64, now time.Time) bool {
	if v < nanosBand && v < f.clock {
		return true // (a)
	}
	if submitted <= 0 || submitted >= f.start {
		return false
	}
	if v < nanosBand { // (b)
		return v <= observeLimit(now)
	}
	return v <= uint64(now.UnixNano())
}

// holds reports whether the table holds key at s or newer: an entry at s is an
// echo, or stale.
func (n *Node) holds(key []byte, s state.Stamp) bool {
	e, ok := n.table.Get(key)
	return ok && !s.Newer(e.Stamp)
}

// ownEvent judges an event of this node's origin that came by path k, submitted at
// submitted (unix nanos), at now (the rule above): take reports whether to offer it to
// the table (a repair's earlier process's write); if not, st is its verdict: STALE for
// an echo (the table holds it or newer), INVALID for one refused (counted, logged).
func (n *Node) ownEvent(k applyKind, h *wire.EventHead, submitted int64, now time.Time) (st fanoutv1.ItemStatus, take bool) {
	if k == applyRepair && n.own.floor.earlier(h.Version, submitted, now) {
		return fanoutv1.ItemStatus_ITEM_STATUS_UNSPECIFIED, true
	}
	if n.holds(h.TaskID, state.Stamp{Version: h.Version, Origin: n.cfg.NodeID}) {
		return fanoutv1.ItemStatus_ITEM_STATUS_STALE, false
	}
	if k == applyLive {
		n.own.replicateRefused.Add(1)
		n.warnOwnOrigin("replicate", h)
	} else {
		n.own.syncRefused.Add(1)
		n.warnOwnOrigin("anti_entropy", h)
	}
	return fanoutv1.ItemStatus_ITEM_STATUS_INVALID, false
}

// warnOwnOrigin logs a refused entry, at most once every refusalLogEvery.
func (n *Node) warnOwnOrigin(path string, h *wire.EventHead) {
	now := n.cfg.Now().UnixNano()
	if last := n.own.lastLog.Load(); now-last >= int64(refusalLogEvery) && n.own.lastLog.CompareAndSwap(last, now) {
		n.log.Warn("refused an entry that claims this node's origin but was never written by this process "+
			"(not in its state table, and at or above the versions it hands out): a peer planted it, or another process runs with this --node-id",
			"path", path, "task_id", string(h.TaskID), "version", h.Version, "floor", n.own.floor.clock,
			"refused_replicate", n.own.replicateRefused.Load(), "refused_anti_entropy", n.own.syncRefused.Load())
	}
}

// sourceWrites counts, per source (the peer that sent them), the peer writes that
// added a key to the state table and those refused at its bounds: a flood of new
// keys, relayed or replicated, shows who sends it. At most maxOriginSeries sources
// are kept; the rest count together under otherOrigin, as received events do.
type sourceWrites struct{ boundedSeries[sourceCount] }

type sourceCount struct{ added, refused atomic.Uint64 }

// of returns source's counters, adding them if there is room.
func (s *sourceWrites) of(source string) *sourceCount {
	return s.boundedSeries.of(source, func() *sourceCount { return new(sourceCount) })
}

// sourceTally counts a request's peer writes, for its sender's sourceCount (add):
// the atomics are shared, so they are added once per request.
type sourceTally struct{ added, refused uint64 }

// count records a peer write's result.
func (c *sourceTally) count(r state.Result) {
	switch {
	case r.Outcome == state.Full:
		c.refused++
	case r.Added:
		c.added++
	}
}

// add adds t's counts.
func (c *sourceCount) add(t *sourceTally) {
	if t.added != 0 {
		c.added.Add(t.added)
	}
	if t.refused != 0 {
		c.refused.Add(t.refused)
	}
}
